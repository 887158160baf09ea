"""What a run or a sweep produced, and how it is saved and loaded (``summary.json``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmhost.bench.metrics import LevelSummary

SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
REQUESTS_JSONL = "requests.jsonl"
REPORT_HTML = "report.html"
# 2: itl_s is over gaps between token events (was per-request TPOT, now tpot_s); requests_per_s
# counts successful requests only; goodput, server figures and saturation added
FORMAT = "llmhost-bench/2"


@dataclass
class ConfigResult:
    """One configuration (one server setup) and its levels."""

    name: str
    url: str
    api: str
    params: dict[str, Any] = field(default_factory=dict)  # model, threads, max_concurrent, ...
    price_per_hour: float | None = None
    workload: dict[str, Any] = field(default_factory=dict)
    levels: list[LevelSummary] = field(default_factory=list)
    error: str | None = None  # why it produced no figures (failed to start, ...)
    # why its levels ended before the last one: "saturated", "error_rate" or "interrupted"
    stopped: str | None = None
    stop_detail: str = ""
    skipped_levels: list[str] = field(default_factory=list)  # levels not run after a stop
    saturated_at: str | None = None  # first level showing saturation (even when it was the last)
    # CPU and memory of the server process started for it and of its children over the levels
    # (sweeps; see llmhost.bench.procstats); None for a server it did not start
    processes: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["levels"] = [lv.to_json() for lv in self.levels]
        return d

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ConfigResult:
        obj = dict(obj)
        levels = [LevelSummary.from_json(lv) for lv in obj.pop("levels", [])]
        return cls(levels=levels, **obj)


@dataclass
class Recommendation:
    """A choice over all configurations and levels, with the figure it was chosen on."""

    goal: str  # most_cost_effective | best_throughput | best_latency | slo
    title: str
    config: str | None
    level: str | None
    metric: str
    value: float | None
    note: str = ""
    figures: dict[str, float | None] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Recommendation:
        return cls(**obj)


@dataclass
class BenchResults:
    configs: list[ConfigResult] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    started_at: str = ""
    finished_at: str = ""
    out_dir: str | None = None
    format: str = FORMAT  # of the summary.json read (compare warns when two differ)

    def levels(self) -> list[LevelSummary]:
        return [lv for c in self.configs for lv in c.levels]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "interrupted": self.interrupted,
            "settings": self.settings,
            "configs": [c.to_json() for c in self.configs],
            "recommendations": [asdict(r) for r in self.recommendations],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any], out_dir: str | None = None) -> BenchResults:
        return cls(
            configs=[ConfigResult.from_json(c) for c in obj.get("configs", [])],
            recommendations=[Recommendation.from_json(r) for r in obj.get("recommendations", [])],
            settings=obj.get("settings", {}),
            interrupted=bool(obj.get("interrupted", False)),
            started_at=obj.get("started_at", ""),
            finished_at=obj.get("finished_at", ""),
            out_dir=out_dir,
            format=str(obj.get("format", "")),
        )


def load_results(path: str | Path) -> BenchResults:
    """Results of a directory written by ``llmhost bench run``/``sweep`` (or its summary.json)."""
    p = Path(path)
    file = p / SUMMARY_JSON if p.is_dir() else p
    return BenchResults.from_json(json.loads(file.read_text(encoding="utf-8")), str(file.parent))
