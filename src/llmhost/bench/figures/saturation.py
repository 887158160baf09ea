"""Saturation: when raising the load (concurrency or request rate) stops paying.

After each level of rising load, the level is compared with the best earlier one (highest output
tokens/s; for the retrieval workloads, which generate nothing, inputs or documents/s): when throughput
grew by less than ``min_gain`` (a fraction, 0.05 = 5%) while p50 end-to-end latency grew by at least as
much, the server is saturated — more load only queues — and the remaining, higher levels are not run.
Comparing with the best earlier level rather than the previous one keeps a noisy dip from hiding a
plateau.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.bench.figures.metrics import LevelSummary

LATENCY = "e2e_s_p50"


def throughput(lv: LevelSummary) -> float:
    """Output tokens/s, or a retrieval level's inputs (documents)/s: it has no output tokens."""
    return lv.output_tokens_per_s or lv.items_per_s


@dataclass(frozen=True)
class SaturationRule:
    min_gain: float = 0.05

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_gain < 1.0:
            raise ValueError("the saturation gain is a fraction in [0, 1), e.g. 0.05 for 5%")

    def check(self, levels: list[LevelSummary]) -> str | None:
        """Why the last of ``levels`` (in the order run) shows saturation, or ``None``."""
        if len(levels) < 2:
            return None
        last, earlier = levels[-1], levels[:-1]
        best = max(earlier, key=throughput)
        if last.load <= best.load or throughput(best) <= 0:
            return None  # not a higher load than the best level, or nothing to compare with
        lat_best, lat_last = best.get(LATENCY), last.get(LATENCY)
        if not lat_best or lat_last is None:
            return None
        gain = throughput(last) / throughput(best) - 1.0
        what = "output tok/s" if best.output_tokens_per_s else "items/s"
        growth = lat_last / lat_best - 1.0
        if gain >= self.min_gain or growth < self.min_gain:
            return None
        return (
            f"{last.level}: {what} {gain:+.1%} over {best.level} (less than {self.min_gain:.0%}) "
            f"while p50 E2E {growth:+.1%}"
        )
