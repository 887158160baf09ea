"""Prometheus metrics; the engine reports into them through the EngineObserver protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmhost.engine.request import GenerationEvent
from llmhost.engine.stats import EngineStats
from llmhost.process.lifecycle import asyncio_tasks

# metric names carry their unit
REQUESTS_TOTAL = "llmhost_requests"  # _total added by the client library
REJECTED_TOTAL = "llmhost_rejected_requests"
ENDED_TOTAL = "llmhost_request_failures"
PROMPT_TOKENS_TOTAL = "llmhost_prompt_tokens"
GENERATION_TOKENS_TOTAL = "llmhost_generation_tokens"
REASONING_TOKENS_TOTAL = "llmhost_reasoning_tokens"
TTFT_S = "llmhost_time_to_first_token_seconds"
TPOT_S = "llmhost_time_per_output_token_seconds"
E2E_S = "llmhost_e2e_request_latency_seconds"
QUEUE_S = "llmhost_request_queue_time_seconds"
STEP_SEQUENCES = "llmhost_step_sequences"
STEP_TOKENS = "llmhost_step_tokens"
STEP_S = "llmhost_step_duration_seconds"
ENCODE_S = "llmhost_media_encode_seconds"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
SEQ_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


class _EngineCollector(Collector):
    """Gauges read from the engine at scrape time."""

    def __init__(self, stats: Callable[[], EngineStats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        s = self._stats()
        if s is None:
            return
        yield GaugeMetricFamily(
            "llmhost_num_requests_running", "Sequences holding KV and decoding", s.running
        )
        yield GaugeMetricFamily("llmhost_num_requests_waiting", "Requests queued for a sequence", s.waiting)
        yield GaugeMetricFamily(
            "llmhost_kv_cache_used_tokens", "KV cells in use (upper bound)", s.kv_tokens_used
        )
        yield GaugeMetricFamily(
            "llmhost_kv_cache_capacity_tokens", "KV cells in the context", s.kv_tokens_capacity
        )
        usage = s.kv_tokens_used / s.kv_tokens_capacity if s.kv_tokens_capacity else 0.0
        yield GaugeMetricFamily("llmhost_kv_cache_usage_ratio", "KV cells in use / capacity", min(1.0, usage))
        yield CounterMetricFamily(
            "llmhost_prefix_cache_lookups", "Prompts looked up in the prefix cache", s.prefix_cache_lookups
        )
        yield CounterMetricFamily(
            "llmhost_prefix_cache_hits", "Prompts that reused cached KV", s.prefix_cache_hits
        )
        yield CounterMetricFamily(
            "llmhost_prefix_cache_reused_tokens",
            "Prompt tokens not prefilled thanks to the prefix cache",
            s.prefix_cache_reused_tokens,
        )
        yield CounterMetricFamily(
            "llmhost_prompt_tokens_prefilled", "Prompt tokens actually decoded", s.prompt_tokens_prefilled
        )
        yield from _prompt_cache_metrics(s)
        tasks = asyncio_tasks()
        yield GaugeMetricFamily("llmhost_asyncio_tasks", "Tasks alive on the server's event loop", tasks)
        yield CounterMetricFamily("llmhost_spec_draft_tokens", "Speculative tokens proposed", s.draft_tokens)
        yield CounterMetricFamily(
            "llmhost_spec_accepted_tokens", "Speculative tokens the model confirmed", s.draft_tokens_accepted
        )
        yield CounterMetricFamily(
            "llmhost_media_encoded", "Images and audio run through the projector's encoder", s.media_encoded
        )
        yield CounterMetricFamily(
            "llmhost_media_cache_hits",
            "Images and audio decoded from cached embeddings instead of encoded again",
            s.media_cache_hits,
        )


def _prompt_cache_metrics(s: EngineStats) -> Iterable[Metric]:
    """The host-memory cache tier (`--prompt-cache-mb`)."""
    counters = (
        ("hits", "Prompts whose KV was restored from host memory", s.prompt_cache_hits),
        (
            "restored_tokens",
            "Prompt tokens restored from host memory instead of prefilled",
            s.prompt_cache_restored_tokens,
        ),
        ("stores", "KV states saved to host memory as they left the context", s.prompt_cache_stores),
        ("evictions", "Saved KV states dropped to stay within the budget", s.prompt_cache_evictions),
        (
            "restore_failures",
            "Restores llama.cpp refused (the prompt was prefilled instead)",
            s.prompt_cache_restore_failures,
        ),
    )
    for name, help_text, value in counters:
        yield CounterMetricFamily(f"llmhost_prompt_cache_{name}", help_text, value)
    gauges = (
        ("entries", "KV states held in host memory", s.prompt_cache_entries),
        ("bytes", "Bytes of KV states held in host memory", s.prompt_cache_bytes),
        ("capacity_bytes", "Host memory budget for KV states", s.prompt_cache_capacity_bytes),
    )
    for name, help_text, value in gauges:
        yield GaugeMetricFamily(f"llmhost_prompt_cache_{name}", help_text, value)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(REQUESTS_TOTAL, "Finished requests", ["api", "finish_reason"], registry=r)
        self.rejected = Counter(REJECTED_TOTAL, "Requests refused before generation", ["reason"], registry=r)
        self.ended = Counter(
            ENDED_TOTAL,
            "Requests the engine ended early: errors, aborts and timeouts, by reason",
            ["finish_reason", "reason"],
            registry=r,
        )
        self.prompt_tokens = Counter(PROMPT_TOKENS_TOTAL, "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter(GENERATION_TOKENS_TOTAL, "Generated tokens", registry=r)
        self.reasoning_tokens = Counter(
            REASONING_TOKENS_TOTAL,
            "Generated tokens of thoughts (tags not counted; also in llmhost_generation_tokens)",
            registry=r,
        )
        self.ttft = Histogram(TTFT_S, "Arrival to first token", buckets=LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram(
            TPOT_S, "Time per output token after the first", buckets=TPOT_BUCKETS, registry=r
        )
        self.e2e = Histogram(E2E_S, "Arrival to last token", buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Histogram(QUEUE_S, "Arrival to first prompt chunk", buckets=LATENCY_BUCKETS, registry=r)
        self.step_seqs = Histogram(
            STEP_SEQUENCES, "Sequences per llama_decode", buckets=SEQ_BUCKETS, registry=r
        )
        self.step_tokens = Histogram(
            STEP_TOKENS, "Tokens per llama_decode", buckets=TOKEN_BUCKETS, registry=r
        )
        self.step_s = Histogram(STEP_S, "Duration of one engine step", buckets=LATENCY_BUCKETS, registry=r)
        self.encode_s = Histogram(
            ENCODE_S,
            "Time a request's images and audio took in the projector's encoder (requests that encoded any)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def attach(self, stats: Callable[[], EngineStats | None]) -> None:
        self.registry.register(_EngineCollector(stats))

    # EngineObserver: called from the engine thread (prometheus_client is thread-safe)
    def on_step(self, num_seqs: int, num_tokens: int, seconds: float) -> None:
        self.step_seqs.observe(num_seqs)
        self.step_tokens.observe(num_tokens)
        self.step_s.observe(seconds)

    def on_finish(self, event: GenerationEvent) -> None:
        if event.reason:
            finish = event.finish_reason.value if event.finish_reason else "unknown"
            self.ended.labels(finish_reason=finish, reason=event.reason).inc()
        t = event.timings
        self.prompt_tokens.inc(event.prompt_tokens)
        self.generation_tokens.inc(event.completion_tokens)
        self.reasoning_tokens.inc(event.reasoning_tokens)
        if t is None:
            return
        self.queue.observe(t.queue_ms / 1000)
        if t.encode_ms:
            self.encode_s.observe(t.encode_ms / 1000)
        if t.predicted_n:
            self.ttft.observe(t.ttft_ms / 1000)
            self.e2e.observe(t.total_ms / 1000)
        if t.predicted_n > 1:
            self.tpot.observe(t.predicted_per_token_ms / 1000)

    def count(self, api: str, finish_reason: str) -> None:
        self.requests.labels(api=api, finish_reason=finish_reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
