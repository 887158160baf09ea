"""The tuning SLO, and what one measured load level of a candidate shows against it.

"ITL" in the SLO is vLLM's TPOT: a request's (last token − first token) / (output tokens − 1). That
is the per-request inter-token figure vLLM bounds in ``--goodput tpot:MS``; vLLM's ITL is per gap
between stream events and is no per-request figure, and a server that flushes several speculative
tokens per event has long gaps but a short time per token. The per-gap ITL is still reported.

A level meets the SLO when its P-th percentile TTFT ≤ the TTFT bound, its P-th percentile TPOT ≤ the
ITL bound, and at least P% of its requests succeeded (a failed request is a miss, whatever its
figures). A level that did not run to its end never meets it: one stopped because it could no longer
(``slo_missed``, see llmhost.bench.load.slostop) or cut short (``interrupted``) has too few requests to
judge. Goodput is the bench's: successful requests/s meeting both bounds per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmhost.bench.figures.metrics import LevelSummary
from llmhost.bench.load.slostop import STOPPED as SLO_MISSED
from llmhost.shared.jsontypes import JSONObject
from llmhost.tune.doc import LevelJSON

# the percentiles every level reports (llmhost.bench.figures.metrics.PERCENTILES)
PERCENTILES = (50, 90, 99)
UNFINISHED = (SLO_MISSED, "interrupted")  # LevelSummary.stopped of a level that did not run to its end


@dataclass(frozen=True)
class TuneSLO:
    ttft_ms: float
    itl_ms: float  # bound on TPOT, see the module's docstring
    percentile: int = 90

    def __post_init__(self) -> None:
        if self.ttft_ms <= 0 or self.itl_ms <= 0:
            raise ValueError("SLO bounds are positive milliseconds")
        if self.percentile not in PERCENTILES:
            raise ValueError(f"the SLO percentile is one of {', '.join(map(str, PERCENTILES))}")

    def goodput(self) -> dict[str, float]:
        """The bench's per-request goodput bounds."""
        return {"ttft": self.ttft_ms, "tpot": self.itl_ms}

    def describe(self) -> str:
        p = self.percentile
        return f"p{p} TTFT ≤ {self.ttft_ms:g} ms and p{p} ITL (TPOT) ≤ {self.itl_ms:g} ms"


def _ms(summary: LevelSummary, key: str) -> float | None:
    v = summary.get(key)
    return None if v is None else v * 1000.0


@dataclass
class LevelOutcome:
    """One load level of one candidate, in the figures the tuner decides on."""

    level: str
    concurrency: int | None
    requests: int
    success_pct: float
    output_tokens_per_s: float  # total tokens/s (output)
    per_user_tokens_per_s: float | None  # 1 / TPOT at the SLO's percentile: above 1 / bound meets it
    ttft_ms: float | None  # at the SLO's percentile
    tpot_ms: float | None  # at the SLO's percentile
    itl_ms: float | None  # per gap, at the SLO's percentile (reported, not bounded)
    goodput_rps: float
    cost_per_1m_tokens_usd: float | None
    meets_slo: bool
    why: str  # which bound it missed, or "" when it met the SLO
    stopped: str | None = None
    requests_per_s: float | None = None  # successful requests / wall time
    by_model: dict[str, JSONObject] = field(default_factory=dict)  # a mix's figures, model by model

    def slack(self, slo: TuneSLO) -> float:
        """Largest figure / bound ratio (≤ 1: within the SLO); infinite when nothing was measured."""
        if self.ttft_ms is None or self.requests == 0:
            return float("inf")
        return max(self.ttft_ms / slo.ttft_ms, (self.tpot_ms or 0.0) / slo.itl_ms)

    def to_json(self) -> LevelJSON:
        return {
            "level": self.level,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "success_pct": self.success_pct,
            "output_tokens_per_s": self.output_tokens_per_s,
            "per_user_tokens_per_s": self.per_user_tokens_per_s,
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "itl_ms": self.itl_ms,
            "goodput_rps": self.goodput_rps,
            "cost_per_1m_tokens_usd": self.cost_per_1m_tokens_usd,
            "meets_slo": self.meets_slo,
            "why": self.why,
            "stopped": self.stopped,
            "requests_per_s": self.requests_per_s,
            "by_model": self.by_model,
        }

    @classmethod
    def from_json(cls, obj: LevelJSON) -> LevelOutcome:
        return cls(**obj)


def judge(summary: LevelSummary, slo: TuneSLO) -> LevelOutcome:
    p = slo.percentile
    ttft, tpot = _ms(summary, f"ttft_s_p{p}"), _ms(summary, f"tpot_s_p{p}")
    misses = []
    if summary.successes == 0:
        misses.append("no request succeeded")
    elif summary.success_pct < p:
        misses.append(f"{summary.success_pct:.0f}% succeeded (< {p}%)")
    if ttft is not None and ttft > slo.ttft_ms:
        misses.append(f"p{p} TTFT {ttft:.0f} ms > {slo.ttft_ms:g}")
    if tpot is not None and tpot > slo.itl_ms:
        misses.append(f"p{p} TPOT {tpot:.1f} ms > {slo.itl_ms:g}")
    if summary.stopped in UNFINISHED:
        misses.append(f"stopped early ({summary.stop_detail or summary.stopped})")
    return LevelOutcome(
        level=summary.level,
        concurrency=summary.concurrency,
        requests=summary.requests,
        success_pct=summary.success_pct,
        output_tokens_per_s=summary.output_tokens_per_s,
        per_user_tokens_per_s=1000.0 / tpot if tpot else None,
        ttft_ms=ttft,
        tpot_ms=tpot,
        itl_ms=_ms(summary, f"itl_s_p{p}"),
        goodput_rps=summary.goodput_rps or 0.0,
        cost_per_1m_tokens_usd=summary.cost_per_1m_tokens_usd,
        meets_slo=not misses,
        why="; ".join(misses),
        stopped=summary.stopped,
        requests_per_s=summary.requests_per_s,
        by_model=summary.by_model,
    )
