"""Per-request measurements and per-level figures (TTFT, ITL/TPOT, E2E percentiles, throughput).

Names carry their unit: ``ttft_s``, ``itl_s``, ``e2e_s`` are seconds, ``ms_per_token`` milliseconds,
``*_per_s`` rates. Distributions are reported as ``<name>_p50`` / ``_p90`` / ``_p99`` over the
successful requests of a level.

- TTFT: request sent → first generated token received. E2E: sent → last byte.
- ITL (= TPOT): (E2E − TTFT) / (output tokens − 1). ms per token: E2E / output tokens.
- Output throughput: output tokens of successful requests / wall time of the level.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from llmhost.bench import cost

TTFT_S = "ttft_s"
ITL_S = "itl_s"
E2E_S = "e2e_s"
MS_PER_TOKEN = "ms_per_token"
OUTPUT_TOKENS_PER_S = "output_tokens_per_s"
INPUT_TOKENS_PER_S = "input_tokens_per_s"
REQUESTS_PER_S = "requests_per_s"
PERCENTILES = (50, 90, 99)
DISTRIBUTIONS = (TTFT_S, ITL_S, MS_PER_TOKEN, E2E_S)

# Failure kinds. A request fails with exactly one of these; nothing else is counted as an error.
CONNECTION_REFUSED = "connection_refused"
CONNECTION_ERROR = "connection_error"
TIMEOUT = "timeout"
HTTP_429 = "http_429"
HTTP_4XX = "http_4xx"
HTTP_5XX = "http_5xx"
MALFORMED_STREAM = "malformed_stream"
STREAM_ERROR = "stream_error"
OTHER = "other"
ERROR_KINDS = (
    CONNECTION_REFUSED,
    CONNECTION_ERROR,
    TIMEOUT,
    HTTP_429,
    HTTP_4XX,
    HTTP_5XX,
    MALFORMED_STREAM,
    STREAM_ERROR,
    OTHER,
)


def error_kind_for_status(status: int) -> str:
    if status == 429:
        return HTTP_429
    if status >= 500:
        return HTTP_5XX
    return HTTP_4XX


@dataclass
class RequestRecord:
    """One request as measured. Times are seconds; ``start_s`` is relative to the start of the run."""

    config: str
    level: str
    user: int
    start_s: float
    warmup: bool
    ok: bool = False
    status: int | None = None
    error: str | None = None  # one of ERROR_KINDS when not ok
    error_detail: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: float | None = None
    ms_per_token: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    tokens_counted_by: str | None = None  # "server" (usage/details) or "events"

    def finish_ok(self, ttft_s: float, e2e_s: float, output_tokens: int) -> None:
        self.ok = True
        self.ttft_s = ttft_s
        self.e2e_s = e2e_s
        self.output_tokens = output_tokens
        if output_tokens > 1:
            self.itl_s = (e2e_s - ttft_s) / (output_tokens - 1)
        if output_tokens > 0:
            self.ms_per_token = 1000.0 * e2e_s / output_tokens

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default); ``None`` for no values."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class LevelSummary:
    """Figures of one load level (one concurrency, or one request rate) of one configuration."""

    config: str
    level: str  # "c=4" or "rate=2.0"
    mode: str  # "closed" or "open"
    concurrency: int | None
    rate_rps: float | None
    requests: int
    successes: int
    success_pct: float
    errors: dict[str, int]
    wall_s: float
    requests_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    output_tokens: int
    input_tokens: int
    mean_in_flight: float
    distributions: dict[str, float | None] = field(default_factory=dict)  # "ttft_s_p50" → value
    price_per_hour: float | None = None
    minutes_per_1m_tokens: float | None = None
    cost_per_1m_tokens_usd: float | None = None
    total_tokens_per_s_blended: float | None = None
    blended_price_per_1m_tokens_usd: float | None = None
    discount: float = 0.0
    stopped: str | None = None  # why the level ended early ("error_rate", "interrupted")

    def get(self, key: str) -> float | None:
        """A figure by its flat name (``ttft_s_p50``, ``output_tokens_per_s``, ...)."""
        if key in self.distributions:
            return self.distributions[key]
        value = getattr(self, key, None)
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def load(self) -> float:
        """The x coordinate of this level: its concurrency, or its request rate."""
        if self.concurrency is not None:
            return float(self.concurrency)
        return float(self.rate_rps or 0.0)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def flat(self) -> dict[str, Any]:
        """One CSV row."""
        row = {k: v for k, v in asdict(self).items() if k not in ("errors", "distributions")}
        row.update(self.distributions)
        for kind in ERROR_KINDS:
            row[f"errors_{kind}"] = self.errors.get(kind, 0)
        return row

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LevelSummary:
        return cls(**obj)


def summarize_level(
    records: list[RequestRecord],
    *,
    config: str,
    level: str,
    mode: str,
    concurrency: int | None,
    rate_rps: float | None,
    wall_s: float,
    price_per_hour: float | None,
    discount: float = 0.0,
    stopped: str | None = None,
) -> LevelSummary:
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    errors: dict[str, int] = {}
    for r in measured:
        if not r.ok:
            kind = r.error or OTHER
            errors[kind] = errors.get(kind, 0) + 1
    wall = max(wall_s, 1e-9)
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    dists: dict[str, float | None] = {}
    for name in DISTRIBUTIONS:
        values = [v for r in ok if (v := getattr(r, name)) is not None]
        for q in PERCENTILES:
            dists[f"{name}_p{q}"] = percentile(values, q)
    busy = sum(r.e2e_s for r in measured if r.e2e_s is not None)
    summary = LevelSummary(
        config=config,
        level=level,
        mode=mode,
        concurrency=concurrency,
        rate_rps=rate_rps,
        requests=len(measured),
        successes=len(ok),
        success_pct=100.0 * len(ok) / len(measured) if measured else 0.0,
        errors=errors,
        wall_s=wall_s,
        requests_per_s=len(measured) / wall,
        output_tokens_per_s=out_tokens / wall,
        input_tokens_per_s=in_tokens / wall,
        output_tokens=out_tokens,
        input_tokens=in_tokens,
        mean_in_flight=busy / wall,
        distributions=dists,
        price_per_hour=price_per_hour,
        discount=discount,
        stopped=stopped,
    )
    tok_s = summary.output_tokens_per_s
    if tok_s > 0:
        summary.minutes_per_1m_tokens = cost.minutes_per_1m_tokens(tok_s)
        if price_per_hour is not None:
            summary.cost_per_1m_tokens_usd = cost.cost_per_1m_tokens(tok_s, price_per_hour)
    itl_p50 = dists.get(f"{ITL_S}_p50")
    users = float(concurrency) if concurrency is not None else summary.mean_in_flight
    if itl_p50 and users > 0:
        summary.total_tokens_per_s_blended = cost.total_tokens_per_s(users, itl_p50)
        if price_per_hour is not None:
            summary.blended_price_per_1m_tokens_usd = cost.blended_price_per_1m_tokens(
                price_per_hour, summary.total_tokens_per_s_blended, discount
            )
    return summary
