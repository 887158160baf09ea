"""Each candidate's lifecycle and figures, and the choice among those that met the SLO."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from llmhost.bench.figures.procstats import Processes
from llmhost.tune.doc import CandidateJSON, PickJSON
from llmhost.tune.slo import LevelOutcome, TuneSLO
from llmhost.tune.space import Candidate


class CandidateState(enum.Enum):
    UNFIT = "unfit"  # does not fit the host's CPUs (or cannot be expressed); never started
    PENDING = "pending"  # in the grid, not measured yet
    MEASURING = "measuring"  # its server is up and levels are being run
    MEASURED = "measured"  # every level it was going to run was run (up to saturation)
    FAILED = "failed"  # did not start, or its measurement raised
    PRUNED = "pruned"  # the search decided it cannot win (the reason says why)
    OUT_OF_TIME = "out_of_time"  # the time budget ran out before it was measured
    INTERRUPTED = "interrupted"  # stopped mid-measurement (Ctrl-C or budget); its levels so far kept


@dataclass
class CandidateRecord:
    candidate: Candidate
    state: CandidateState = CandidateState.PENDING
    reason: str = ""  # why it was kept, dropped or pruned
    phase: str = ""  # baseline | corner | refine
    levels: list[LevelOutcome] = field(default_factory=list)
    seconds: float = 0.0  # start to stop, server start-up included
    results_dir: str | None = None  # its `llmhost bench` results directory
    # CPU and memory of its server, copies and the load generator over its levels (bench.figures.procstats)
    processes: Processes | None = None

    @property
    def measured(self) -> bool:
        return bool(self.levels)

    def meeting(self) -> list[LevelOutcome]:
        return [lv for lv in self.levels if lv.meets_slo]

    def best_goodput(self) -> float | None:
        """Highest goodput among its levels meeting the SLO; ``None`` when none did."""
        ok = self.meeting()
        return max(lv.goodput_rps for lv in ok) if ok else None

    def slack(self, slo: TuneSLO) -> float:
        return min((lv.slack(slo) for lv in self.levels), default=float("inf"))

    def to_json(self) -> CandidateJSON:
        c = self.candidate
        return {
            "name": c.name,
            "settings": {
                "copies": c.copies,
                "threads": c.threads,
                "max_concurrent": c.max_concurrent,
                "max_batch_tokens": c.max_batch_tokens,
                "quant": c.quant,
                "speculative": c.speculative,
            },
            "baseline": c.baseline,
            "state": self.state.value,
            "reason": self.reason,
            "phase": self.phase,
            "met_slo": bool(self.meeting()),
            "best_goodput_rps": self.best_goodput(),
            "seconds": round(self.seconds, 2),
            "results_dir": self.results_dir,
            "processes": self.processes,
            "levels": [lv.to_json() for lv in self.levels],
        }


@dataclass(frozen=True)
class Pick:
    """A candidate at one of its levels."""

    name: str
    level: str
    goodput_rps: float
    cost_per_1m_tokens_usd: float | None
    output_tokens_per_s: float

    def to_json(self) -> PickJSON:
        return {
            "name": self.name,
            "level": self.level,
            "goodput_rps": self.goodput_rps,
            "cost_per_1m_tokens_usd": self.cost_per_1m_tokens_usd,
            "output_tokens_per_s": self.output_tokens_per_s,
        }


def _points(records: list[CandidateRecord]) -> list[tuple[CandidateRecord, LevelOutcome]]:
    return [(r, lv) for r in records for lv in r.meeting()]


def _pick(r: CandidateRecord, lv: LevelOutcome) -> Pick:
    return Pick(r.candidate.name, lv.level, lv.goodput_rps, lv.cost_per_1m_tokens_usd, lv.output_tokens_per_s)


def best_goodput(records: list[CandidateRecord]) -> Pick | None:
    """The level meeting the SLO with the most goodput; ties go to the cheaper, then fewer CPUs."""
    pts = _points(records)
    if not pts:
        return None
    r, lv = max(
        pts,
        key=lambda p: (
            p[1].goodput_rps,
            p[1].output_tokens_per_s,
            # fewer CPUs; the baseline (every CPU, however many) last
            -p[0].candidate.copies * (p[0].candidate.threads or 10**6),
        ),
    )
    return _pick(r, lv)


def cheapest(records: list[CandidateRecord]) -> Pick | None:
    """The level meeting the SLO with the lowest cost per 1M output tokens (the most output tokens/s,
    the host's price being the same for every candidate)."""
    pts = _points(records)
    if not pts:
        return None
    r, lv = max(pts, key=lambda p: (p[1].output_tokens_per_s, p[1].goodput_rps))
    return _pick(r, lv)
