"""What measuring one target means: its URL and API, the load levels, the workload, the stops and the
prices. Defaults are those of ``llmhost bench run``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from llmhost.bench.arrivals import Arrivals
from llmhost.bench.http import Endpoint
from llmhost.bench.loadgen import LoadSettings
from llmhost.bench.saturation import SaturationRule
from llmhost.bench.slo import GoodputSLO
from llmhost.bench.slostop import SloStop, stop_rule
from llmhost.bench.targets import Target


@dataclass
class BenchConfig:
    """Everything about measuring one target. Defaults are those of ``llmhost bench run``."""

    url: str
    api: str = "openai"  # openai | chat | sagemaker | tgi
    concurrency: list[int] = field(default_factory=lambda: [1])  # closed-loop levels
    rates: list[float] | None = None  # open-loop levels (req/s); replaces concurrency
    burstiness: float = 1.0  # open loop: gamma shape of inter-arrival gaps (1.0: Poisson), as vLLM
    duration_s: float | None = None  # per level; with neither this nor requests: 30 s
    requests: int | None = None  # per level
    warmup: int = 0  # requests per level, excluded
    timeout_s: float = 120.0
    max_error_rate: float | None = 0.5
    prompt_tokens: int = 128
    max_new_tokens: int = 64
    prompts_file: str | None = None
    builtin_prompts: bool = False
    num_prompts: int = 32  # distinct synthetic prompts
    tokenize: bool = True  # use the target's /tokenize for exact lengths when it has one
    price_per_hour: float | None = None
    discount: float = 0.0
    model: str | None = None  # OpenAI "model"; default: the first of GET /v1/models, else "default"
    component: str | None = None  # SageMaker inference component header
    ignore_eos: bool = True
    temperature: float | None = None  # None: the server's default
    headers: dict[str, str] = field(default_factory=dict)
    name: str = "run"
    seed: int = 0
    max_in_flight: int = 1024
    at_concurrency: float | None = None  # recommendations: load for "most cost-effective"
    slo_ms_per_token: float | None = None
    slo_ttft_ms: float | None = None
    goodput: dict[str, float] | None = None  # per-request SLO in ms: ttft, tpot, itl, e2e
    slo_stop: float | None = None  # percentile: stop a level that can no longer meet goodput's ttft/tpot
    saturation_gain: float | None = 0.05  # stop raising load below this throughput gain; None: never
    server_metrics: bool = True  # scrape the target's /metrics around and during each level
    metrics_interval_s: float = 1.0  # scrapes during a level (0: before and after only)

    def load_settings(self) -> LoadSettings:
        duration = self.duration_s
        if duration is None and self.requests is None:
            duration = 30.0
        return LoadSettings(
            duration_s=duration,
            requests=self.requests,
            warmup=self.warmup,
            timeout_s=self.timeout_s,
            max_error_rate=self.max_error_rate,
            max_in_flight=self.max_in_flight,
            seed=self.seed,
            burstiness=self.burstiness,
            slo_stop=self.slo_stop_rule(),
        )

    def slo_stop_rule(self) -> SloStop | None:
        """The SLO a level is stopped on (``slo_stop``: its percentile over goodput's ttft/tpot)."""
        return None if self.slo_stop is None else stop_rule(self.slo(), self.slo_stop, self.requests)

    def slo(self) -> GoodputSLO | None:
        return GoodputSLO.from_mapping(self.goodput) if self.goodput else None

    def saturation(self) -> SaturationRule | None:
        return SaturationRule(self.saturation_gain) if self.saturation_gain is not None else None

    def levels(self) -> list[tuple[str, int | None, float | None]]:
        if self.rates:
            return [(f"rate={r:g}", None, float(r)) for r in self.rates]
        return [(f"c={c}", int(c), None) for c in self.concurrency]

    def validate(self) -> None:
        Target(self.api)  # checks the api name
        Endpoint.parse(self.url)
        self.load_settings()
        if not self.rates and (not self.concurrency or min(self.concurrency) < 1):
            raise ValueError("concurrency levels must be at least 1")
        for rate in self.rates or []:
            Arrivals(rate, self.burstiness)  # checks the rate and the burstiness
        self.slo()
        self.saturation()
        if self.metrics_interval_s < 0:
            raise ValueError("the metrics interval must be >= 0")
        if not 0.0 <= self.discount < 1.0:
            raise ValueError("discount is a rate in [0, 1)")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError("temperature must be >= 0")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
