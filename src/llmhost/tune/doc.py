"""tune.json, as `llmhost tune` writes it (and report.html and the terminal read it): the SLO, the
space searched, every candidate with its levels, and the answer."""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict

from llmhost.bench.figures.procstats import Processes
from llmhost.shared.jsontypes import JSONObject


class LevelJSON(TypedDict):
    """A measured load level of a candidate (tune.slo.LevelOutcome)."""

    level: str
    concurrency: int | None
    requests: int
    success_pct: float
    output_tokens_per_s: float
    per_user_tokens_per_s: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    itl_ms: float | None
    goodput_rps: float
    cost_per_1m_tokens_usd: float | None
    meets_slo: bool
    why: str
    stopped: str | None
    requests_per_s: float | None
    by_model: NotRequired[dict[str, JSONObject]]  # a mix's figures model by model (bench's by_model)


class CandidateSettings(TypedDict):
    copies: int
    threads: int | None
    max_concurrent: int | None
    max_batch_tokens: int | None
    quant: str | None  # None: the model as given
    speculative: bool


class CandidateJSON(TypedDict):
    name: str
    settings: CandidateSettings
    baseline: bool
    state: str
    reason: str
    phase: str
    met_slo: bool
    best_goodput_rps: float | None
    seconds: float
    results_dir: str | None
    processes: Processes | None
    levels: list[LevelJSON]


class PickJSON(TypedDict):
    """A candidate at one of its levels."""

    name: str
    level: str
    goodput_rps: float
    cost_per_1m_tokens_usd: float | None
    output_tokens_per_s: float


class BaselinePicks(TypedDict):
    best_goodput: PickJSON | None
    cheapest: PickJSON | None


class Answer(TypedDict):
    chosen: PickJSON | None  # the highest goodput meeting the SLO
    cheapest: PickJSON | None
    baseline: BaselinePicks
    goodput_vs_baseline: float | None
    cost_vs_baseline: float | None  # below 1: cheaper than the baseline


class SLOJSON(TypedDict):
    ttft_ms: float
    itl_ms: float
    percentile: int
    itl_means: str
    describe: str


class HostJSON(TypedDict):
    cpus: int
    router_cpus: int


class TuneDoc(TypedDict):
    format: str
    started_at: str
    written_at: str
    slo: SLOJSON
    host: HostJSON
    price_per_hour: float
    max_minutes: float
    models: dict[str, str]  # quantization → GGUF
    workload: JSONObject  # the bench workload's settings (its model_mix: the models requests name)
    adapters: list[JSONObject]  # the LoRA adapters every candidate served: name, path, scale
    space: dict[str, list[object]]  # each axis's values: numbers, names, switches
    answer: Answer
    candidates: list[CandidateJSON]
    endpoint_file: NotRequired[str]  # written when a candidate met the SLO
