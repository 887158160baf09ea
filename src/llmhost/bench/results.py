"""What a run or a sweep produced, and how it is saved and loaded (``summary.json``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import TypeAdapter

from llmhost.bench.figures.metrics import LevelSummary
from llmhost.bench.figures.procstats import Processes
from llmhost.shared.jsontypes import JSONObject

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
    params: JSONObject = field(default_factory=dict)  # serve settings: model, threads, max_concurrent, ...
    price_per_hour: float | None = None
    workload: JSONObject = field(default_factory=dict)  # Workload.describe()
    levels: list[LevelSummary] = field(default_factory=list)
    error: str | None = None  # why it produced no figures (failed to start, ...)
    # why its levels ended before the last one: "saturated", "error_rate" or "interrupted"
    stopped: str | None = None
    stop_detail: str = ""
    skipped_levels: list[str] = field(default_factory=list)  # levels not run after a stop
    saturated_at: str | None = None  # first level showing saturation (even when it was the last)
    # CPU and memory of the server process started for it and of its children over the levels
    # (sweeps; see llmhost.bench.figures.procstats); None for a server it did not start
    processes: Processes | None = None

    def to_json(self) -> JSONObject:
        d: JSONObject = asdict(self)
        d["levels"] = [lv.to_json() for lv in self.levels]
        return d

    @classmethod
    def from_json(cls, obj: JSONObject) -> ConfigResult:
        """As summary.json holds it, checked against the fields declared here (a 422-like ValidationError
        names the one a file gets wrong)."""
        return TypeAdapter(cls).validate_python(obj)


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
    def from_json(cls, obj: JSONObject) -> Recommendation:
        return TypeAdapter(cls).validate_python(obj)


@dataclass
class BenchResults:
    configs: list[ConfigResult] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)
    settings: JSONObject = field(default_factory=dict)  # BenchConfig.to_json()
    interrupted: bool = False
    started_at: str = ""
    finished_at: str = ""
    out_dir: str | None = None
    format: str = FORMAT  # of the summary.json read (compare warns when two differ)

    def levels(self) -> list[LevelSummary]:
        return [lv for c in self.configs for lv in c.levels]

    def to_json(self) -> JSONObject:
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
    def from_json(cls, obj: JSONObject, out_dir: str | None = None) -> BenchResults:
        read = TypeAdapter(BenchResults).validate_python({k: v for k, v in obj.items() if k != "out_dir"})
        read.out_dir = out_dir
        read.format = str(obj.get("format", ""))
        return read


def load_results(path: str | Path) -> BenchResults:
    """Results of a directory written by ``llmhost bench run``/``sweep`` (or its summary.json)."""
    p = Path(path)
    file = p / SUMMARY_JSON if p.is_dir() else p
    return BenchResults.from_json(json.loads(file.read_text(encoding="utf-8")), str(file.parent))
