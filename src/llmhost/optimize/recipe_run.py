"""`llmhost optimize run recipe.yaml`: apply a recipe, then benchmark base against optimized.

A recipe (`recipe_file`: its keys and an example) names a model, the techniques applied to it and
the workload both are measured on.

The techniques apply in order (quantize, then the system-prompt state of the quantized model,
then the serving settings). The artifact is built or reused (`artifact.build_or_reuse`), the recipe's
serving settings are written into its recipe.yaml, then `llmhost serve BASE_GGUF` and `llmhost serve
ARTIFACT_DIR` are started one after the other on 127.0.0.1 and measured with `llmhost bench` on the
same workload; both figure sets and their ratios go into the artifact's benchmark.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict

from llmhost.bench.figures.metrics import LevelSummary
from llmhost.optimize.artifact import Artifact, build_or_reuse, write_serving_settings
from llmhost.optimize.recipe_file import RecipeError, RunRecipe
from llmhost.settings.serve import SERVE_SPEC
from llmhost.shared.jsontypes import JSONObject

BENCHMARK_JSON = "benchmark.json"
BENCHMARK_FORMAT = "llmhost-optimize-benchmark/1"
# figures compared, (name in LevelSummary.get, label, unit scale, higher is better)
FIGURES: tuple[tuple[str, str, float, bool], ...] = (
    ("output_tokens_per_s", "output tok/s", 1.0, True),
    ("ttft_s_p50", "p50 TTFT (ms)", 1000.0, False),
    ("ms_per_token_p50", "p50 ms/token", 1.0, False),
    ("cost_per_1m_tokens_usd", "cost per 1M tokens (USD)", 1.0, False),
)

Say = Callable[[str], None]


# -- benchmark -----------------------------------------------------------------------------------------
@dataclass
class Measured:
    name: str
    argv: list[str]
    level: LevelSummary
    metrics: dict[str, float]  # the server's llmhost_spec_* counters after the run


def _spec_counters(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("llmhost_spec_"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def bench_config(url: str, name: str, recipe: RunRecipe) -> Any:
    from llmhost.bench import BenchConfig

    b = recipe.benchmark
    return BenchConfig(
        url=url,
        api=b.api,
        concurrency=[b.concurrency],
        requests=b.requests,
        warmup=b.warmup,
        timeout_s=b.timeout_s,
        prompt_tokens=b.prompt_tokens,
        max_new_tokens=b.max_new_tokens,
        prompts_file=b.prompts_file,
        builtin_prompts=b.builtin_prompts and b.prompts_file is None,
        price_per_hour=b.price_per_hour,
        temperature=0.0,  # greedy: the requests speculative decoding applies to
        name=name,
    )


def serve_argv(target: str | Path, port: int, recipe: RunRecipe) -> list[str]:
    from llmhost.bench.process import HOST, llmhost_command

    given = {
        "host": HOST,
        "port": port,
        "flash_attn": recipe.flash_attn,
        "max_concurrent": max(recipe.benchmark.concurrency, 1),
        "threads": recipe.threads or None,
        "chat_template": recipe.chat_template_file or None,
    }
    return [*llmhost_command(), "serve", str(target), *SERVE_SPEC.argv(given)]


async def _measure(name: str, target: str | Path, recipe: RunRecipe, logs: Path, say: Say) -> Measured:
    from llmhost.bench import arun_benchmark
    from llmhost.bench.load.http import HttpClientError, simple_request
    from llmhost.bench.process import HOST, ServerProcess, free_port

    port = free_port()
    url = f"http://{HOST}:{port}"
    argv = serve_argv(target, port, recipe)
    say(f"{name}: starting llmhost serve {target}")
    proc = ServerProcess(argv, {}, logs / f"{name}.log")
    try:
        await proc.wait_ready(url + "/ping", recipe.benchmark.startup_timeout_s)
        b = recipe.benchmark
        say(f"{name}: {b.requests} requests at concurrency {b.concurrency}, {b.max_new_tokens} new tokens")
        results = await arun_benchmark(bench_config(url, name, recipe))
        levels = results.levels()
        if not levels:
            raise RecipeError(f"{name}: the benchmark measured nothing")
        counters: dict[str, float] = {}
        try:
            status, body = await simple_request(url + "/metrics", "GET", None, 10.0)
            if status == 200:
                counters = _spec_counters(body.decode("utf-8", "replace"))
        except (TimeoutError, HttpClientError, OSError):
            pass  # counters are extras: a server that does not answer them leaves the comparison as it is
        return Measured(name, argv, levels[0], counters)
    except RuntimeError as exc:  # the server did not start
        raise RecipeError(f"{name}: {exc}") from None
    finally:
        proc.stop()


def _ratios(base: LevelSummary, opt: LevelSummary) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, *_ in FIGURES:
        a, b = base.get(key), opt.get(key)
        out[key] = b / a if a and b is not None else None
    return out


class ServedFigures(TypedDict):
    """One side of the comparison: how it was served, its level's figures, the server's counters."""

    served: list[str]
    level: JSONObject  # LevelSummary.to_json()
    metrics: dict[str, float]


class BenchmarkReport(TypedDict):
    """What benchmark.json holds."""

    format: str
    created_unix: int
    model: str
    artifact: str
    key: str
    reused: bool
    build_seconds: float
    recipe: JSONObject  # the run recipe, as its file is read (system_prompt left out)
    serving: dict[str, Any]  # RunRecipe.serving()
    settings: JSONObject  # the bench settings (BenchConfig.to_json()), with no url or name
    base: ServedFigures
    optimized: ServedFigures
    ratios: dict[str, float | None]


@dataclass
class RunResult:
    artifact: Artifact
    base: Measured
    optimized: Measured
    report: BenchmarkReport


def run_recipe(recipe: RunRecipe, out_dir: str | Path, say: Say | None = None) -> RunResult:
    """Build or reuse the artifact, benchmark base then optimized, write benchmark.json."""
    from llmhost.store import resolve_model

    say = say or (lambda _msg: None)
    source = resolve_model(recipe.model)
    out = Path(out_dir)
    t0 = time.perf_counter()
    artifact = build_or_reuse(
        source,
        out,
        recipe.artifact_recipe(),
        say=say,
        threads=recipe.threads,
        eval_max_tokens=recipe.eval_max_tokens,
    )
    build_s = time.perf_counter() - t0
    write_serving_settings(out, recipe.serving())
    base, optimized = _measure_both(source, out, recipe, say)
    report = _report(recipe, source, out, artifact, build_s, base, optimized)
    (out / BENCHMARK_JSON).write_text(json.dumps(report, indent=2) + "\n")
    return RunResult(artifact, base, optimized, report)


def _measure_both(source: Path, out: Path, recipe: RunRecipe, say: Say) -> tuple[Measured, Measured]:
    """The base model, then the artifact, served and benchmarked one after the other; the servers'
    logs are kept (and named in the error) only when one fails."""
    logs = Path(tempfile.mkdtemp(prefix="llmhost-optimize-run-"))

    async def both() -> tuple[Measured, Measured]:
        base = await _measure("base", source, recipe, logs, say)
        optimized = await _measure("optimized", out, recipe, logs, say)
        return base, optimized

    try:
        measured = asyncio.run(both())
    except RecipeError as exc:
        raise RecipeError(f"{exc}\n(server logs in {logs})") from None
    shutil.rmtree(logs, ignore_errors=True)
    return measured


def _report(
    recipe: RunRecipe,
    source: Path,
    out: Path,
    artifact: Artifact,
    build_s: float,
    base: Measured,
    optimized: Measured,
) -> BenchmarkReport:
    """What benchmark.json holds: the recipe, the settings measured, both figure sets and their ratios."""
    return {
        "format": BENCHMARK_FORMAT,
        "created_unix": int(time.time()),
        "model": str(source),
        "artifact": str(out),
        "key": artifact.key,
        "reused": artifact.reused,
        "build_seconds": round(build_s, 3),
        "recipe": recipe.model_dump(mode="json", exclude={"system_prompt"}),
        "serving": recipe.serving(),
        "settings": bench_config("", "", recipe).to_json() | {"url": None, "name": None},
        "base": _served(base),
        "optimized": _served(optimized),
        "ratios": _ratios(base.level, optimized.level),
    }


def _served(measured: Measured) -> ServedFigures:
    return {"served": measured.argv, "level": measured.level.to_json(), "metrics": measured.metrics}


def _fmt(value: float | None, scale: float) -> str:
    if value is None:
        return "–"
    v = value * scale
    return f"{v:.4f}" if abs(v) < 1 else f"{v:.2f}" if abs(v) < 1000 else f"{v:,.0f}"


def table(result: RunResult) -> Any:
    """A rich table: base, optimized and optimized / base for each figure."""
    from rich.table import Table

    base, opt = result.base.level, result.optimized.level
    t = Table(title=f"base vs optimized ({result.artifact.directory})")
    t.add_column("figure")
    t.add_column("base", justify="right")
    t.add_column("optimized", justify="right")
    t.add_column("optimized / base", justify="right")
    ratios = result.report["ratios"]
    for key, label, scale, higher in FIGURES:
        ratio = ratios.get(key)
        if ratio is None:
            shown = "–"
        else:
            better = ratio > 1 if higher else ratio < 1
            shown = f"[{'green' if better else 'red'}]{ratio:.2f}x[/]"
        t.add_row(label, _fmt(base.get(key), scale), _fmt(opt.get(key), scale), shown)
    t.add_row("successes", f"{base.successes}/{base.requests}", f"{opt.successes}/{opt.requests}", "")
    drafts = [
        m.get("llmhost_spec_draft_tokens_total", 0.0) for m in (result.base.metrics, result.optimized.metrics)
    ]
    if any(drafts):
        accepted = [
            m.get("llmhost_spec_accepted_tokens_total", 0.0)
            for m in (result.base.metrics, result.optimized.metrics)
        ]
        cells = [f"{a:.0f}/{d:.0f}" if d else "–" for a, d in zip(accepted, drafts, strict=True)]
        t.add_row("speculative tokens accepted", *cells, "")
    return t
