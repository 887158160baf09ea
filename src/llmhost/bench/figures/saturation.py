"""Saturation: when raising the load (concurrency or request rate) stops paying.

After each level of rising load, the level is compared with the best earlier one (highest output
tokens/s): when output throughput grew by less than ``min_gain`` (a fraction, 0.05 = 5%) while p50
end-to-end latency grew by at least as much, the server is saturated — more load only queues — and
the remaining, higher levels are not run. Comparing with the best earlier level rather than the
previous one keeps a noisy dip from hiding a plateau.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.bench.figures.metrics import LevelSummary

LATENCY = "e2e_s_p50"


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
        best = max(earlier, key=lambda lv: lv.output_tokens_per_s)
        if last.load <= best.load or best.output_tokens_per_s <= 0:
            return None  # not a higher load than the best level, or nothing to compare with
        lat_best, lat_last = best.get(LATENCY), last.get(LATENCY)
        if not lat_best or lat_last is None:
            return None
        gain = last.output_tokens_per_s / best.output_tokens_per_s - 1.0
        growth = lat_last / lat_best - 1.0
        if gain >= self.min_gain or growth < self.min_gain:
            return None
        return (
            f"{last.level}: output tok/s {gain:+.1%} over {best.level} (less than {self.min_gain:.0%}) "
            f"while p50 E2E {growth:+.1%}"
        )
