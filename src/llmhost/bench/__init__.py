"""``llmhost bench``: load tests over HTTP against llmhost or any peer server (llama-server, vLLM,
TGI), latency and throughput figures, cost per 1M tokens, sweeps and recommendations.

Public API::

    from llmhost.bench import BenchConfig, run_benchmark
    results = run_benchmark(BenchConfig(url="http://127.0.0.1:8080", api="openai", concurrency=[1, 4],
                                        requests=8, prompt_tokens=64, max_new_tokens=32,
                                        price_per_hour=1.52), out_dir="bench-out")
    for level in results.levels():
        print(level.level, level.output_tokens_per_s, level.get("ttft_s_p50"))
"""

from __future__ import annotations

from llmhost.bench.config import BenchConfig
from llmhost.bench.figures.compare import Ratio, compare_results
from llmhost.bench.figures.cost import (
    blended_price_per_1m_tokens,
    cost_per_1m_tokens,
    minutes_per_1m_tokens,
    total_tokens_per_s,
)
from llmhost.bench.figures.metrics import LevelSummary, RequestRecord
from llmhost.bench.figures.saturation import SaturationRule
from llmhost.bench.figures.slo import GoodputSLO
from llmhost.bench.results import BenchResults, ConfigResult, Recommendation, load_results
from llmhost.bench.runner import arun_benchmark, run_benchmark
from llmhost.bench.sweep import SweepSpec, arun_sweep, run_sweep

__all__ = [
    "BenchConfig",
    "BenchResults",
    "ConfigResult",
    "GoodputSLO",
    "LevelSummary",
    "Ratio",
    "Recommendation",
    "RequestRecord",
    "SaturationRule",
    "SweepSpec",
    "arun_benchmark",
    "arun_sweep",
    "blended_price_per_1m_tokens",
    "compare_results",
    "cost_per_1m_tokens",
    "load_results",
    "minutes_per_1m_tokens",
    "run_benchmark",
    "run_sweep",
    "total_tokens_per_s",
]
