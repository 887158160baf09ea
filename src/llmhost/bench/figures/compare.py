"""Ratios between two result directories (``llmhost bench compare A B`` prints B / A)."""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.bench.figures.metrics import LevelSummary
from llmhost.bench.results import BenchResults

COMPARED = (
    "output_tokens_per_s",
    "requests_per_s",
    "success_pct",
    "ttft_s_p50",
    "ttft_s_p99",
    "tpot_s_p50",
    "itl_s_p50",
    "ms_per_token_p50",
    "e2e_s_p50",
    "goodput_rps",
    "cost_per_1m_tokens_usd",
)


@dataclass(frozen=True)
class Ratio:
    config: str
    level: str
    metric: str
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a


def _pairs(a: BenchResults, b: BenchResults) -> list[tuple[str, LevelSummary, LevelSummary]]:
    """Levels measured by both: same configuration name and level; when each side holds a single
    configuration, by level alone (two runs of ``bench run`` against different servers)."""
    out: list[tuple[str, LevelSummary, LevelSummary]] = []
    b_index = {(lv.config, lv.level): lv for lv in b.levels()}
    for lv in a.levels():
        other = b_index.get((lv.config, lv.level))
        if other is not None:
            out.append((lv.config, lv, other))
    if out or len(a.configs) != 1 or len(b.configs) != 1:
        return out
    b_levels = {lv.level: lv for lv in b.levels()}
    name = f"{a.configs[0].name} → {b.configs[0].name}"
    return [(name, lv, b_levels[lv.level]) for lv in a.levels() if lv.level in b_levels]


def compare_results(a: BenchResults, b: BenchResults, metrics: tuple[str, ...] = COMPARED) -> list[Ratio]:
    rows: list[Ratio] = []
    for config, la, lb in _pairs(a, b):
        for metric in metrics:
            rows.append(Ratio(config, la.level, metric, la.get(metric), lb.get(metric)))
    return rows
