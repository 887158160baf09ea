"""Which candidate to measure next, and which ones not to measure at all.

1. Corners: for each group of copies × quantization × speculation, the candidates whose threads,
   max_concurrent and max_batch_tokens are each at the smallest or largest value of their axis,
   most CPUs and most concurrent sequences first: goodput grows with what a candidate may use, so
   those are the likeliest answers, measured before a tight budget runs out; the small corners
   then bound the group from below.
2. Pruning, before each measurement: a candidate lying on one axis between two measured ones that
   agree on every other setting is dropped when both missed the SLO at every level (the SLO cannot be
   met in between), or when neither reached ``prune_ratio`` of the best goodput so far (the region
   is dominated). And a candidate whose goodput ceiling is below the best goodput so far is dropped:
   it serves at most min(highest load, copies × max_concurrent) requests at once, none faster than
   one request alone on a copy of the same threads (the requests/s of a measured candidate at
   concurrency 1), so no more than that many times that rate.
3. Refinement: the remaining candidates nearest on the grid (index steps summed over the axes) to
   the best one so far — highest goodput meeting the SLO, else the one closest to the SLO frontier
   (smallest figure / bound ratio) — so the budget goes where the answer is.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.tune.slo import TuneSLO
from llmhost.tune.space import Candidate
from llmhost.tune.state import CandidateRecord, CandidateState

NUMERIC = ("threads", "max_concurrent", "max_batch_tokens")
CEILING_MARGIN = 0.1  # a goodput ceiling must miss the best by more than this share: measurement noise
AXES = ("copies", "threads", "max_concurrent", "max_batch_tokens", "quant", "speculative")


def _group(c: Candidate) -> tuple[object, ...]:
    return (c.copies, c.quant, c.speculative)


def corners(cands: list[Candidate]) -> list[Candidate]:
    """Candidates at the corners of their group's box, most CPUs (then sequences) first."""
    out = []
    for c in cands:
        peers = [p for p in cands if _group(p) == _group(c)]
        if all(
            getattr(c, a) in (min(getattr(p, a) for p in peers), max(getattr(p, a) for p in peers))
            for a in NUMERIC
        ):
            out.append(c)
    return sorted(out, key=lambda c: (-c.copies * (c.threads or 0), -(c.max_concurrent or 0), c.name))


@dataclass(frozen=True)
class Search:
    axes: dict[str, tuple[object, ...]]
    slo: TuneSLO
    prune_ratio: float = 0.8
    host_cpus: int = 1  # the threads of a candidate that leaves them unset (the baseline)
    max_load: int | None = None  # the highest concurrency level (None: no ceiling pruning)

    def __post_init__(self) -> None:
        if not 0.0 <= self.prune_ratio <= 1.0:
            raise ValueError("prune_ratio is a fraction in [0, 1]")

    def distance(self, a: Candidate, b: Candidate) -> int:
        return sum(
            abs(self.axes[ax].index(getattr(a, ax)) - self.axes[ax].index(getattr(b, ax))) for ax in AXES
        )

    def anchor(self, measured: list[CandidateRecord]) -> CandidateRecord | None:
        """The best measured grid candidate: most goodput meeting the SLO, else nearest the SLO."""
        grid = [r for r in measured if not r.candidate.baseline and r.measured]
        feasible = [r for r in grid if r.best_goodput() is not None]
        if feasible:
            return max(feasible, key=lambda r: r.best_goodput() or 0.0)
        return min(grid, key=lambda r: r.slack(self.slo), default=None)

    def single_rate(self, cand: Candidate, records: list[CandidateRecord]) -> float | None:
        """Requests/s of one request at a time on a copy like ``cand``'s (same threads, model and
        speculation), from a measured candidate's concurrency-1 level."""

        def same(c: Candidate) -> bool:
            return (c.threads or self.host_cpus, c.quant, c.speculative) == (
                cand.threads or self.host_cpus,
                cand.quant,
                cand.speculative,
            )

        rates = [
            lv.requests_per_s
            for r in records
            if same(r.candidate)
            for lv in r.levels
            if lv.concurrency == 1 and lv.requests_per_s and lv.stopped is None
        ]
        return max(rates) if rates else None

    def ceiling_reason(self, cand: Candidate, records: list[CandidateRecord], best: float) -> str | None:
        rate = self.single_rate(cand, records)
        if self.max_load is None or rate is None or cand.max_concurrent is None:
            return None
        at_once = min(self.max_load, cand.copies * cand.max_concurrent)
        if at_once * rate * (1.0 + CEILING_MARGIN) >= best:
            return None
        return (
            f"its goodput cannot reach the best so far ({best:.2f} req/s): at most {at_once} request(s) "
            f"at once, each at most {rate:.3f} req/s (one request alone on such a copy) = "
            f"{at_once * rate:.2f} req/s"
        )

    def prune_reason(self, cand: Candidate, records: list[CandidateRecord]) -> str | None:
        measured = [r for r in records if r.measured and not r.candidate.baseline]
        best = max((r.best_goodput() or 0.0 for r in records), default=0.0)
        if best > 0 and (why := self.ceiling_reason(cand, records, best)) is not None:
            return why
        for ax in NUMERIC:
            line = [
                r
                for r in measured
                if all(getattr(r.candidate, o) == getattr(cand, o) for o in AXES if o != ax)
            ]
            lo = max(
                (r for r in line if getattr(r.candidate, ax) < getattr(cand, ax)),
                key=lambda r: getattr(r.candidate, ax),
                default=None,
            )
            hi = min(
                (r for r in line if getattr(r.candidate, ax) > getattr(cand, ax)),
                key=lambda r: getattr(r.candidate, ax),
                default=None,
            )
            if lo is None or hi is None:
                continue
            ends = f"{lo.candidate.name} and {hi.candidate.name}"
            g_lo, g_hi = lo.best_goodput(), hi.best_goodput()
            if g_lo is None and g_hi is None:
                return f"between {ends} on {ax}, which both missed the SLO at every level"
            if best > 0 and max(g_lo or 0.0, g_hi or 0.0) < self.prune_ratio * best:
                return (
                    f"between {ends} on {ax}, whose goodput stays below {self.prune_ratio:.0%} "
                    f"of the best ({best:.2f} req/s)"
                )
        return None

    def next(self, records: list[CandidateRecord]) -> tuple[CandidateRecord, str] | None:
        """Prune what can be pruned, then the next pending record to measure and its phase."""
        # the baseline is measured first, by the runner, never chosen by the search
        pending = [r for r in records if r.state is CandidateState.PENDING and not r.candidate.baseline]
        for r in pending:
            why = self.prune_reason(r.candidate, records)
            if why is not None:
                r.state, r.reason = CandidateState.PRUNED, why
        pending = [r for r in pending if r.state is CandidateState.PENDING]
        if not pending:
            return None
        grid = [
            r.candidate for r in records if r.state is not CandidateState.UNFIT and not r.candidate.baseline
        ]
        corner_set = set(corners(grid))
        firsts = [r for r in pending if r.candidate in corner_set]
        if firsts:
            order = {c: i for i, c in enumerate(corners(grid))}
            return min(firsts, key=lambda r: order[r.candidate]), "corner"
        anchor = self.anchor(records)
        if anchor is None:
            return pending[0], "refine"
        return min(
            pending,
            key=lambda r: (
                self.distance(r.candidate, anchor.candidate),
                r.candidate.cpus(1),
                r.candidate.name,
            ),
        ), "refine"
