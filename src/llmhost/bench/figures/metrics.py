"""Per-request measurements and per-level figures (TTFT, TPOT, ITL, E2E, throughput, goodput).

Names carry their unit: ``ttft_s``, ``tpot_s``, ``itl_s``, ``e2e_s`` are seconds, ``ms_per_token``
milliseconds, ``*_per_s`` rates. Distributions are reported as ``<name>_mean`` and ``<name>_p50`` /
``_p90`` / ``_p99`` (numpy's linear interpolation) over the successful requests of a level. The
definitions are those of ``vllm bench serve``, so figures compare with published ones:

- TTFT: request sent → first event carrying generated text. E2E: sent → last byte of the answer.
- TPOT (per request): (last token event − first token event) / (output tokens − 1), tokens as the
  server reports them. vLLM writes it (E2EL − TTFT) / (tokens − 1), its E2EL ending at the last
  token event; GuideLLM calls the same figure "inter-token latency". Requests of one token have none.
- ITL (per gap): the time between two consecutive token events of a request; the distribution is
  over every gap of every successful request, as vLLM's. An event may carry several tokens (a
  server flushing a speculative draft, or several choices); like vLLM we record one gap per event,
  so ITL shows what a reader of the stream sees while TPOT shows the cost per token. Events that
  arrive in the same network read get the same arrival time (a gap of 0).
- ms per token: 1000 × E2E / output tokens (GuideLLM's "time per output token").
- Output throughput: output tokens of successful requests / wall time of the level; requests/s
  counts successful requests only; goodput: successful requests meeting the SLO / wall time.
- Images (``--images``): ``encode_ms`` is the time the server says (its ``timings.encode_ms``, llmhost's)
  a request's images took in the projector's encoder, 0 for those it had cached; its distribution
  is over the requests with images whose answer told it (OpenAI chat, TGI and SageMaker streams).
- Retrieval (embeddings, rerank): the answer is one body, so a request has an E2E and no TTFT; its
  ``items`` are the inputs embedded or documents scored, and ``items_per_s`` their throughput.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field

import numpy as np
from pydantic import TypeAdapter

from llmhost.bench.figures import cost
from llmhost.bench.figures.slo import GoodputSLO
from llmhost.shared.jsontypes import JSONObject

TTFT_S = "ttft_s"
TPOT_S = "tpot_s"
ITL_S = "itl_s"
E2E_S = "e2e_s"
MS_PER_TOKEN = "ms_per_token"
OUTPUT_TOKENS_PER_S = "output_tokens_per_s"
INPUT_TOKENS_PER_S = "input_tokens_per_s"
REQUESTS_PER_S = "requests_per_s"
PERCENTILES = (50, 90, 99)
DISTRIBUTIONS = (TTFT_S, TPOT_S, ITL_S, MS_PER_TOKEN, E2E_S)
STATS = ("mean", *(f"p{q}" for q in PERCENTILES))  # suffixes of each distribution's figures
LATER_TURN_TTFT_S = "later_turn_ttft_s"  # conversations: TTFT of turns 2 and on
ANSWER_TTFT_S = "answer_ttft_s"  # thinking models: time to the first answer token (after the thought)
ENCODE_MS = "encode_ms"  # images: the server's time in the projector's encoder, per request

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
    tpot_s: float | None = None
    ms_per_token: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    tokens_counted_by: str | None = None  # "server" (usage/details) or "events"
    token_events: int = 0  # stream events that carried generated text
    itl_gaps_s: list[float] = field(default_factory=list)  # between consecutive token events
    turn: int | None = None  # conversations: the turn this request was (1: the first)
    model: str | None = None  # in a mix of models (`--model a,b`) or components: the one it named
    # thinking models: the first event of the answer (after the thought), and the thought's tokens
    answer_ttft_s: float | None = None
    reasoning_tokens: int = 0
    items: int = 0  # embed / rerank: the inputs embedded or documents scored
    images: int = 0  # the images the request carried
    encode_ms: float | None = None  # the server's time encoding them (its timings), when it told

    def finish_answer(self, e2e_s: float, items: int) -> None:
        """Fill the figures of a successful retrieval request (one answer, no token events)."""
        self.ok = True
        self.e2e_s = e2e_s
        self.items = items

    def finish_ok(self, token_times_s: list[float], e2e_s: float, output_tokens: int) -> None:
        """Fill the figures of a successful request from the arrival times of its token events
        (seconds after sending, in order), its end-to-end time and its output token count."""
        if not token_times_s:
            raise ValueError("a successful request has at least one token event")
        self.ok = True
        self.ttft_s = token_times_s[0]
        self.e2e_s = e2e_s
        self.output_tokens = output_tokens
        self.token_events = len(token_times_s)
        self.itl_gaps_s = [round(b - a, 7) for a, b in itertools.pairwise(token_times_s)]
        if output_tokens > 1:
            self.tpot_s = (token_times_s[-1] - token_times_s[0]) / (output_tokens - 1)
        if output_tokens > 0:
            self.ms_per_token = 1000.0 * e2e_s / output_tokens

    @property
    def max_itl_s(self) -> float | None:
        return max(self.itl_gaps_s) if self.itl_gaps_s else None

    def to_json(self) -> JSONObject:
        return asdict(self)


def describe(values: list[float]) -> dict[str, float | None]:
    """Mean and percentiles (numpy's default linear interpolation); ``None`` for no values."""
    if not values:
        return dict.fromkeys(STATS)
    arr = np.asarray(values, dtype=np.float64)
    out: dict[str, float | None] = {"mean": float(arr.mean())}
    for q, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES), strict=True):
        out[f"p{q}"] = float(v)
    return out


def distributions(ok: list[RequestRecord]) -> dict[str, float | None]:
    """``ttft_s_p50`` → value, ... over successful requests; ITL over every gap of every request."""
    series: dict[str, list[float]] = {
        TTFT_S: [r.ttft_s for r in ok if r.ttft_s is not None],
        TPOT_S: [r.tpot_s for r in ok if r.tpot_s is not None],
        ITL_S: [g for r in ok for g in r.itl_gaps_s],
        MS_PER_TOKEN: [r.ms_per_token for r in ok if r.ms_per_token is not None],
        E2E_S: [r.e2e_s for r in ok if r.e2e_s is not None],
    }
    out: dict[str, float | None] = {}
    for name in DISTRIBUTIONS:
        for stat, value in describe(series[name]).items():
            out[f"{name}_{stat}"] = value
    out.update(turn_figures(ok))
    out.update(thought_figures(ok))
    out.update(image_figures(ok))
    return out


def image_figures(ok: list[RequestRecord]) -> dict[str, float | None]:
    """Requests with images: the server's encode time (``encode_ms_p50``), over those whose answer
    told it; nothing when no request carried an image or no answer told."""
    told = [r.encode_ms for r in ok if r.images and r.encode_ms is not None]
    if not told:
        return {}
    return {f"{ENCODE_MS}_{stat}": value for stat, value in describe(told).items()}


def thought_figures(ok: list[RequestRecord]) -> dict[str, float | None]:
    """Thinking models: TTFT to the first answer token (``answer_ttft_s_p50``), beside ``ttft_s`` which
    is to the first token of the thought. Nothing when no request thought."""
    if not any(r.reasoning_tokens for r in ok):
        return {}
    answered = [r.answer_ttft_s for r in ok if r.answer_ttft_s is not None]
    return {f"{ANSWER_TTFT_S}_{stat}": value for stat, value in describe(answered).items()}


def turn_figures(ok: list[RequestRecord]) -> dict[str, float | None]:
    """Conversations: TTFT by turn (``turn2_ttft_s_p90``) and over the later turns, the second on
    (``later_turn_ttft_s_p50``): those that resend a conversation a server may still hold. None for
    requests without turns."""
    turns = sorted({r.turn for r in ok if r.turn is not None})
    out: dict[str, float | None] = {}
    for turn in turns:
        of_turn = [r.ttft_s for r in ok if r.turn == turn and r.ttft_s is not None]
        for stat, value in describe(of_turn).items():
            out[f"turn{turn}_{TTFT_S}_{stat}"] = value
    if turns:
        later = [r.ttft_s for r in ok if r.turn is not None and r.turn >= 2 and r.ttft_s is not None]
        for stat, value in describe(later).items():
            out[f"{LATER_TURN_TTFT_S}_{stat}"] = value
    return out


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
    requests_per_s: float  # successful requests / wall time (vLLM's request throughput)
    output_tokens_per_s: float
    input_tokens_per_s: float
    output_tokens: int
    input_tokens: int
    mean_in_flight: float
    reasoning_tokens: int = 0  # of output_tokens, those of thoughts (thinking models); the rest answer
    items: int = 0  # retrieval: inputs embedded or documents scored by the successful requests
    items_per_s: float = 0.0  # items / wall time
    images: int = 0  # images carried by the successful requests
    distributions: dict[str, float | None] = field(default_factory=dict)  # "ttft_s_p50" → value
    price_per_hour: float | None = None
    minutes_per_1m_tokens: float | None = None
    cost_per_1m_tokens_usd: float | None = None
    total_tokens_per_s_blended: float | None = None
    blended_price_per_1m_tokens_usd: float | None = None
    discount: float = 0.0
    stopped: str | None = None  # why the level ended early ("error_rate", "slo_missed", "interrupted")
    stop_detail: str | None = None  # what made it stop, in words
    good_requests: int | None = None  # successful requests meeting the goodput SLO (None: no SLO)
    goodput_rps: float | None = None  # good_requests / wall time
    server_figures: dict[str, float] = field(default_factory=dict)  # "server_queue_depth_max" → value
    server_metrics: JSONObject = field(default_factory=dict)  # raw /metrics deltas and gauges
    conversations: JSONObject | None = None  # the conversation workload's counts (bench.load.convload)
    by_model: dict[str, JSONObject] = field(default_factory=dict)  # a mix's figures, model by model

    def get(self, key: str) -> float | None:
        """A figure by its flat name (``ttft_s_p50``, ``output_tokens_per_s``, ``server_...``)."""
        if key in self.distributions:
            return self.distributions[key]
        if key in self.server_figures:
            return self.server_figures[key]
        value = getattr(self, key, None)
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def load(self) -> float:
        """The x coordinate of this level: its concurrency, or its request rate."""
        if self.concurrency is not None:
            return float(self.concurrency)
        return float(self.rate_rps or 0.0)

    def to_json(self) -> JSONObject:
        return asdict(self)

    def flat(self) -> JSONObject:
        """One CSV row (raw server metrics stay in summary.json)."""
        nested = ("errors", "distributions", "server_figures", "server_metrics", "conversations", "by_model")
        row: JSONObject = {k: v for k, v in asdict(self).items() if k not in nested}
        row.update(self.distributions)
        row.update(self.server_figures)
        for kind in ERROR_KINDS:
            row[f"errors_{kind}"] = self.errors.get(kind, 0)
        return row

    @classmethod
    def from_json(cls, obj: JSONObject) -> LevelSummary:
        return TypeAdapter(cls).validate_python(obj)


def count_errors(measured: list[RequestRecord]) -> dict[str, int]:
    errors: dict[str, int] = {}
    for r in measured:
        if not r.ok:
            kind = r.error or OTHER
            errors[kind] = errors.get(kind, 0) + 1
    return errors


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
    slo: GoodputSLO | None = None,
) -> LevelSummary:
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    wall = max(wall_s, 1e-9)
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
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
        errors=count_errors(measured),
        wall_s=wall_s,
        requests_per_s=len(ok) / wall,
        output_tokens_per_s=out_tokens / wall,
        input_tokens_per_s=in_tokens / wall,
        output_tokens=out_tokens,
        input_tokens=in_tokens,
        mean_in_flight=busy / wall,
        reasoning_tokens=sum(r.reasoning_tokens for r in ok),
        items=sum(r.items for r in ok),
        items_per_s=sum(r.items for r in ok) / wall,
        images=sum(r.images for r in ok),
        distributions=distributions(ok),
        by_model=by_model(measured, wall),
        price_per_hour=price_per_hour,
        discount=discount,
        stopped=stopped,
    )
    if slo is not None:
        summary.good_requests = sum(
            slo.meets(ttft_s=r.ttft_s, tpot_s=r.tpot_s, max_itl_s=r.max_itl_s, e2e_s=r.e2e_s) for r in ok
        )
        summary.goodput_rps = summary.good_requests / wall
    add_costs(summary)
    return summary


def by_model(measured: list[RequestRecord], wall_s: float) -> dict[str, JSONObject]:
    """A mix's figures model by model (nothing when the requests named one model)."""
    models = sorted({r.model for r in measured if r.model is not None})
    if len(models) < 2:
        return {}
    out: dict[str, JSONObject] = {}
    for name in models:
        mine = [r for r in measured if r.model == name]
        ok = [r for r in mine if r.ok]
        figures = distributions(ok)
        shown = {k: figures.get(k) for k in ("ttft_s_p50", "ttft_s_p99", "e2e_s_p50", "tpot_s_p50")}
        out[name] = {
            "requests": len(mine),
            "successes": len(ok),
            "output_tokens_per_s": sum(r.output_tokens for r in ok) / wall_s,
            **shown,
        }
    return out


def add_costs(summary: LevelSummary) -> None:
    """Time and cost per 1M tokens, and the blended 3:1 price (see :mod:`llmhost.bench.figures.cost`)."""
    tok_s, price = summary.output_tokens_per_s, summary.price_per_hour
    if tok_s > 0:
        summary.minutes_per_1m_tokens = cost.minutes_per_1m_tokens(tok_s)
        if price is not None:
            summary.cost_per_1m_tokens_usd = cost.cost_per_1m_tokens(tok_s, price)
    # Per-user decode speed is 1 / TPOT (tokens, however the server groups them into events); the
    # p50 gap between events (ITL) would undercount a server that sends several tokens per event.
    tpot_p50 = summary.distributions.get(f"{TPOT_S}_p50")
    conc = summary.concurrency
    users = float(conc) if conc is not None else summary.mean_in_flight
    if tpot_p50 and users > 0:
        summary.total_tokens_per_s_blended = cost.total_tokens_per_s(users, tpot_p50)
        if price is not None:
            summary.blended_price_per_1m_tokens_usd = cost.blended_price_per_1m_tokens(
                price, summary.total_tokens_per_s_blended, summary.discount
            )
