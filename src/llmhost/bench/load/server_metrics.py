"""Server-side figures of a level, from the target's Prometheus ``/metrics`` when it has one.

The probe scrapes ``/metrics`` right before the measured phase of a level, every ``interval_s``
during it, and after it. Counters (and histogram/summary ``_sum``/``_count``) are reported as their
increase over the level; gauges as their mean and maximum over the scrapes taken during the level
(before and after when there were none — those see an idle server). Samples of one name are summed
over their label sets (an endpoint's copies add up), except ratios (``*_ratio``, ``*_perc``), which
are averaged. Scrape texts are parsed (with prometheus_client's parser) after the level, so parsing
never delays the token arrivals being timed.

Derived figures, from whichever server's names are present (llmhost, llama-server with
``--metrics``, vLLM):

- ``server_prefix_cache_hit_rate``: hits / lookups over the level, as the server counts them
  (llmhost: prompts; vLLM: tokens); llama-server has no such counter;
- ``server_prefix_reuse``: prompt tokens the prefix cache spared / prompt tokens (llmhost's counters of
  tokens reused in the context, restored from its host-memory tier and prefilled),
  ``server_prefix_reused_tokens``: those spared tokens, and ``server_host_restored_tokens``: the part
  restored from host memory;
- ``server_routed_by_prefix``: an endpoint with prefix-aware routing: requests sent to the copy holding
  their prefix / requests routed by prefix (the rest went elsewhere for the load bound);
- ``server_spec_acceptance_rate``: accepted / proposed speculative tokens (llmhost, vLLM);
- ``server_queue_depth_mean``/``_max``: requests waiting (llmhost engine and endpoint router queues,
  llama-server's deferred requests, vLLM's waiting);
- ``server_running_mean``/``_max``: requests being decoded;
- ``server_kv_usage_mean``/``_max``: KV cache in use / capacity, 0..1;
- ``server_generation_tokens``: tokens the server generated over the level;
- ``server_media_encode_ms_mean``: llmhost's mean time per encoder run (an image or clip) over the
  level, and ``server_media_cache_hit_rate``: media taken from its embeddings cache / media that needed
  embeddings (cached + encoded; media whose KV the prefix cache held need neither).

A target without ``/metrics`` (any status but 200, or not the exposition format) has none: no error.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from llmhost.bench.load.http import Endpoint, HttpClientError, simple_request

SCRAPE_TIMEOUT_S = 5.0
MAX_BODY = 8 << 20
# llama-server declares this per-decode average as a counter; it is read as a gauge
AVERAGES_TYPED_AS_COUNTERS = frozenset({"llamacpp:n_busy_slots_per_decode"})

HIT_RATES = (
    ("llmhost_prefix_cache_hits_total", "llmhost_prefix_cache_lookups_total"),
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
)
ACCEPTANCE_RATES = (
    ("llmhost_spec_accepted_tokens_total", "llmhost_spec_draft_tokens_total"),
    ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"),
)
PREFIX_REUSED = "llmhost_prefix_cache_reused_tokens_total"
HOST_RESTORED = "llmhost_prompt_cache_restored_tokens_total"
PREFILLED = "llmhost_prompt_tokens_prefilled_total"
ROUTED = ("llmhost_endpoint_routed_prefix_total", "llmhost_endpoint_routed_spilled_total")
GENERATION_TOKENS = (
    "llmhost_generation_tokens_total",
    "llamacpp:tokens_predicted_total",
    "vllm:generation_tokens_total",
)
QUEUED = (
    "llmhost_num_requests_waiting",
    "llmhost_endpoint_waiting",
    "llamacpp:requests_deferred",
    "vllm:num_requests_waiting",
)
RUNNING = ("llmhost_num_requests_running", "llamacpp:requests_processing", "vllm:num_requests_running")
KV_RATIOS = ("llamacpp:kv_cache_usage_ratio", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
KV_TOKENS = ("llmhost_kv_cache_used_tokens", "llmhost_kv_cache_capacity_tokens")
ENCODE_SECONDS = ("llmhost_media_encode_seconds_sum", "llmhost_media_encode_seconds_count")
MEDIA_ENCODED = "llmhost_media_encoded_total"
MEDIA_CACHE_HITS = "llmhost_media_cache_hits_total"
# what the report and the terminal show, in this order: (key, label, format)
SHOWN = (
    ("server_prefix_cache_hit_rate", "prefix cache hit rate", ".3f"),
    ("server_prefix_reuse", "prefix reuse (tokens)", ".3f"),
    ("server_routed_by_prefix", "routed to prefix copy", ".3f"),
    ("server_spec_acceptance_rate", "speculative acceptance", ".3f"),
    ("server_queue_depth_mean", "queue mean", ".2f"),
    ("server_queue_depth_max", "queue max", ".0f"),
    ("server_running_mean", "running mean", ".2f"),
    ("server_running_max", "running max", ".0f"),
    ("server_kv_usage_mean", "KV use mean", ".3f"),
    ("server_kv_usage_max", "KV use max", ".3f"),
    ("server_generation_tokens", "generated tokens", ".0f"),
    ("server_media_encode_ms_mean", "encode ms mean", ".1f"),
    ("server_media_cache_hit_rate", "media cache hit rate", ".3f"),
)


@dataclass
class Scrape:
    """One ``/metrics`` text reduced to numbers: counters and gauges by sample name."""

    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)


def parse_scrape(text: str) -> Scrape:
    """Parse the Prometheus text format; raises ValueError when ``text`` is not that format."""
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # whatever a non-Prometheus body makes the parser raise
        raise ValueError(f"not the Prometheus text format: {exc}") from exc
    out = Scrape()
    gauges: dict[str, list[float]] = {}
    for family in families:
        kind = "gauge" if family.name in AVERAGES_TYPED_AS_COUNTERS else family.type
        for s in family.samples:
            if not math.isfinite(s.value) or s.name.endswith("_created"):
                continue
            totals = kind in ("histogram", "summary") and s.name.endswith(("_sum", "_count"))
            if kind == "counter" or totals:
                out.counters[s.name] = out.counters.get(s.name, 0.0) + s.value
            elif kind in ("gauge", "unknown", "untyped"):
                gauges.setdefault(family.name, []).append(s.value)
    for name, values in gauges.items():
        ratio = name.endswith(("_ratio", "_perc"))
        out.gauges[name] = sum(values) / len(values) if ratio else sum(values)
    return out


def _first_rate(delta: dict[str, float], pairs: tuple[tuple[str, str], ...]) -> float | None:
    for num, den in pairs:
        if delta.get(den, 0.0) > 0 and num in delta:
            return delta[num] / delta[den]
    return None


def _kv_usage(g: dict[str, float]) -> float | None:
    used, capacity = (g.get(name) for name in KV_TOKENS)
    if used is not None and capacity:
        return used / capacity
    return next((g[name] for name in KV_RATIOS if name in g), None)


def _queued(g: dict[str, float]) -> float | None:
    present = [g[name] for name in QUEUED if name in g]
    return sum(present) if present else None


def _running(g: dict[str, float]) -> float | None:
    return next((g[name] for name in RUNNING if name in g), None)


def derive(delta: dict[str, float], samples: list[Scrape]) -> dict[str, float]:
    """The derived figures (module docstring) from counter increases and gauge samples."""
    out: dict[str, float] = {}
    for key, value in (
        ("server_prefix_cache_hit_rate", _first_rate(delta, HIT_RATES)),
        ("server_spec_acceptance_rate", _first_rate(delta, ACCEPTANCE_RATES)),
        ("server_generation_tokens", next((delta[n] for n in GENERATION_TOKENS if n in delta), None)),
    ):
        if value is not None:
            out[key] = value
    out.update(_reuse(delta))
    out.update(_media(delta))
    for key, fn in (("queue_depth", _queued), ("running", _running), ("kv_usage", _kv_usage)):
        series = [v for s in samples if (v := fn(s.gauges)) is not None]
        if series:
            out[f"server_{key}_mean"] = sum(series) / len(series)
            out[f"server_{key}_max"] = max(series)
    return out


def _media(delta: dict[str, float]) -> dict[str, float]:
    """The encoder's mean time per medium, and the media embeddings cache's hit rate, over the level."""
    out: dict[str, float] = {}
    seconds, runs = (delta.get(name, 0.0) for name in ENCODE_SECONDS)
    if runs > 0:
        out["server_media_encode_ms_mean"] = 1000.0 * seconds / runs
    hits, encoded = delta.get(MEDIA_CACHE_HITS, 0.0), delta.get(MEDIA_ENCODED, 0.0)
    if hits + encoded > 0:
        out["server_media_cache_hit_rate"] = hits / (hits + encoded)
    return out


def _reuse(delta: dict[str, float]) -> dict[str, float]:
    """Prefix reuse over the level, and the share of prefix-routed requests that reached their copy."""
    out: dict[str, float] = {}
    reused, prefilled = delta.get(PREFIX_REUSED), delta.get(PREFILLED)
    if reused is not None and prefilled is not None:
        # absent from a server without the host-memory tier
        restored = delta.get(HOST_RESTORED, 0.0)
        reused += restored
        if reused + prefilled > 0:
            out["server_prefix_reused_tokens"] = reused
            out["server_host_restored_tokens"] = restored
            out["server_prefix_reuse"] = reused / (reused + prefilled)
    routed, spilled = (delta.get(name) for name in ROUTED)
    if routed is not None and spilled is not None and routed + spilled > 0:
        out["server_routed_by_prefix"] = routed / (routed + spilled)
    return out


def summarize_scrapes(before: str, during: list[str], after: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Derived figures and raw figures (``counters``: increase, ``gauges``: mean/max) of a level."""
    first, last = parse_scrape(before), parse_scrape(after)
    middle = []
    for text in during:
        with contextlib.suppress(ValueError):  # one garbled scrape does not lose the level
            middle.append(parse_scrape(text))
    # a counter that went down was reset (server restarted): no figure rather than a wrong one
    delta = {
        name: last.counters[name] - v
        for name, v in first.counters.items()
        if name in last.counters and last.counters[name] >= v
    }
    samples = middle or [first, last]
    names = sorted({n for s in samples for n in s.gauges})
    gauges = {}
    for name in names:
        values = [s.gauges[name] for s in samples if name in s.gauges]
        gauges[name] = {"mean": sum(values) / len(values), "max": max(values)}
    raw = {
        "scrapes": len(middle) + 2,
        "counters": {k: v for k, v in sorted(delta.items()) if v},
        "gauges": gauges,
    }
    return derive(delta, samples), raw


def metrics_path(endpoint: Endpoint, api_path: str) -> str:
    """``/metrics`` under the URL's prefix (without the API route when the URL named it)."""
    return f"{endpoint.prefix.removesuffix(api_path)}/metrics"


async def fetch_text(endpoint: Endpoint, path: str, headers: dict[str, str]) -> str | None:
    """The body of ``GET path`` when it answers 200, else ``None`` (never raises on failures)."""
    url = f"{endpoint.origin}{path}"
    try:
        status, body = await simple_request(
            url, "GET", None, SCRAPE_TIMEOUT_S, {**headers, "Accept": "text/plain"}, MAX_BODY
        )
        return body.decode("utf-8", "replace") if status == 200 else None
    except (TimeoutError, HttpClientError, OSError, UnicodeError):
        return None  # scraping is best effort: the level's own figures never depend on it


class MetricsProbe:
    """Scrapes one target's ``/metrics`` around and during each level (see the module docstring).

    ``available`` is ``None`` until the first scrape, then whether the target has metrics; a target
    without them is not asked again.
    """

    def __init__(self, endpoint: Endpoint, path: str, headers: dict[str, str], interval_s: float) -> None:
        if interval_s < 0:
            raise ValueError("the scrape interval must be >= 0 (0: before and after each level only)")
        self.endpoint = endpoint
        self.path = path
        self.headers = dict(headers)
        self.interval_s = interval_s
        self.available: bool | None = None
        self._before: str | None = None
        self._during: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def begin(self) -> None:
        """Scrape before the measured phase; start scraping during it."""
        self._before, self._during = None, []
        if self.available is False:
            return
        text = await fetch_text(self.endpoint, self.path, self.headers)
        self.available = text is not None and _is_exposition(text)
        if not self.available:
            return
        self._before = text
        if self.interval_s > 0:
            self._stopping = asyncio.Event()
            self._task = asyncio.create_task(self._scrape_during(self._stopping))

    async def _scrape_during(self, stopping: asyncio.Event) -> None:
        # the loop ends on `stopping` too, not on cancellation alone: Python 3.11's asyncio.wait_for (under
        # every scrape) swallows a cancellation that lands as the scrape completes, and the task then
        # scraped on forever while stop() waited for it (a benchmark hung so, once in a loaded test run)
        while not stopping.is_set():
            await asyncio.sleep(self.interval_s)
            text = await fetch_text(self.endpoint, self.path, self.headers)
            if text is not None:
                self._during.append(text)

    async def stop(self) -> None:
        """Stop scraping during the level (also on cancellation)."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping.set()
            task.cancel()
            # wait() rather than awaiting the task: a cancellation of the caller still propagates
            await asyncio.wait({task})

    async def end(self) -> tuple[dict[str, float], dict[str, Any]]:
        """Scrape after the level: its derived and raw figures (both empty without metrics)."""
        await self.stop()
        before, self._before = self._before, None
        if before is None:
            return {}, {}
        after = await fetch_text(self.endpoint, self.path, self.headers)
        if after is None or not _is_exposition(after):
            return {}, {}
        return summarize_scrapes(before, self._during, after)


def _is_exposition(text: str) -> bool:
    try:
        scrape = parse_scrape(text)
    except ValueError:
        return False
    return bool(scrape.counters or scrape.gauges)
