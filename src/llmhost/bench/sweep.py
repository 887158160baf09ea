"""``llmhost bench sweep sweep.yaml``: start each configuration, measure every level, stop it, and
recommend one.

A configuration is one of:

- ``serve:`` — ``llmhost serve MODEL --host 127.0.0.1 --port P`` with any of its settings (``threads``,
  ``max_concurrent``, ``max_batch_tokens``... as the settings spec declares them); the model, the copies
  and each setting may be a list, and the configuration expands to their product;
- ``command:`` — any server command (a peer such as ``llama-server``), with ``{port}``, ``{host}``,
  ``{python}`` and ``{default_model}`` placeholders; readiness is ``GET ready_path`` answering 200;
- ``url:`` — a server that is already running.

Example::

    api: openai
    concurrency: [1, 2, 4]                      # stops rising at saturation (saturation_gain: null: never)
    duration_s: 30
    goodput: {ttft: 500, tpot: 50}              # per-request SLO in ms (ttft, tpot, itl, e2e/e2el)
    prompt_tokens: 128
    max_new_tokens: 64
    price_per_hour: 0.0832
    configurations:
      - serve: {model: default, threads: [1, 2], max_concurrent: [1, 4]}
      - name: llama-server
        command: llama-server -m {default_model} --host {host} --port {port} -t 2 -np 4
        ready_path: /health
"""

from __future__ import annotations

import asyncio
import itertools
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmhost.bench.config import CONVERSATIONS, RETRIEVAL_DEFAULTS, BenchConfig
from llmhost.bench.figures.labels import model_labels
from llmhost.bench.figures.procstats import ProcessUsage
from llmhost.bench.figures.saturation import SaturationRule
from llmhost.bench.figures.slo import GoodputSLO
from llmhost.bench.process import HOST, ServerProcess, endpoint_file, free_port, llmhost_command
from llmhost.bench.report import ResultsWriter
from llmhost.bench.results import BenchResults, ConfigResult
from llmhost.bench.runner import NullProgress, Progress, _now, finish_results, measure_config
from llmhost.bench.serve_config import ServeSpec, as_list, endpoint_adapters, endpoint_engine, label
from llmhost.process.interrupt import run_interruptible
from llmhost.shared import yamltext


class ConfigSpec(BaseModel):
    """One entry of ``configurations``: exactly one of ``serve``, ``command`` or ``url``."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    serve: ServeSpec | None = None
    command: str | list[str] | None = None
    url: str | None = None
    ready_path: str | None = None
    startup_timeout_s: float | None = None
    env: dict[str, str] = Field(default_factory=dict)
    api: Literal["openai", "chat", "messages", "responses", "sagemaker", "tgi"] | None = None
    price_per_hour: float | None = None
    model_name: str | None = None  # OpenAI "model" field to send
    component: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_kind(self) -> ConfigSpec:
        kinds = [k for k in ("serve", "command", "url") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("a configuration needs exactly one of serve, command or url")
        return self


class SweepSpec(BaseModel):
    """A sweep file. Measurement settings apply to every configuration."""

    model_config = ConfigDict(extra="forbid")

    name: str = "sweep"
    api: Literal["openai", "chat", "messages", "responses", "sagemaker", "tgi"] = "openai"
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4])
    rates: list[float] | None = None
    burstiness: float = Field(default=1.0, gt=0)  # open loop: gamma shape of arrival gaps (1: Poisson)
    duration_s: float | None = None
    requests: int | None = None
    warmup: int = 1
    timeout_s: float = 120.0
    max_error_rate: float | None = 0.5
    prompt_tokens: int = 128
    max_new_tokens: int = 64
    temperature: float | None = None
    prompts_file: str | None = None
    builtin_prompts: bool = False
    num_prompts: int = 32
    # conversations (`llmhost bench run --workload conversations`): users = the concurrency levels
    workload: Literal["prompts", "conversations", "embed", "rerank"] = "prompts"
    documents: int = RETRIEVAL_DEFAULTS.documents  # embed / rerank: inputs or documents per request
    document_words: int = RETRIEVAL_DEFAULTS.words
    conversations_file: str | None = None
    turns: int = CONVERSATIONS.turns
    system_prompts: int = CONVERSATIONS.system_prompts
    system_prompt_tokens: int = CONVERSATIONS.system_prompt_tokens
    user_tokens: int = CONVERSATIONS.user_tokens
    think_time_s: tuple[float, float] = CONVERSATIONS.think_time_s
    seed: int = 0
    price_per_hour: float | None = None
    discount: float = 0.0
    ready_path: str = "/ping"
    startup_timeout_s: float = 600.0
    at_concurrency: float | None = None
    slo_ms_per_token: float | None = None
    slo_ttft_ms: float | None = None
    goodput: dict[str, float] | None = None  # per-request SLO, ms: ttft, tpot, itl, e2e (or e2el)
    slo_stop: float | None = Field(default=None, gt=0, lt=100)  # see `llmhost bench run --slo-stop`
    saturation_gain: float | None = 0.05  # stop raising the load below this throughput gain; null: never
    server_metrics: bool = True  # scrape each configuration's /metrics around and during each level
    metrics_interval_s: float = Field(default=1.0, ge=0)
    configurations: list[ConfigSpec]

    @field_validator("goodput")
    @classmethod
    def _goodput(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        return GoodputSLO.from_mapping(v).to_json() if v else None

    @field_validator("saturation_gain")
    @classmethod
    def _saturation(cls, v: float | None) -> float | None:
        if v is not None:
            SaturationRule(v)
        return v

    @classmethod
    def load(cls, path: str | Path) -> SweepSpec:
        data = yamltext.load(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a sweep file is a YAML mapping")
        spec = cls.model_validate(data)
        base = Path(path).resolve().parent
        if spec.prompts_file and not Path(spec.prompts_file).is_absolute():
            spec.prompts_file = str(base / spec.prompts_file)
        if spec.conversations_file and not Path(spec.conversations_file).is_absolute():
            spec.conversations_file = str(base / spec.conversations_file)
        return spec


class Launch(BaseModel):
    """One expanded configuration: how to reach (and maybe start) it."""

    name: str
    kind: Literal["serve", "command", "url"]
    argv: list[str] = Field(default_factory=list)  # with a {port} placeholder still in it
    url: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    spec: ConfigSpec


def _serve_launches(cfg: ConfigSpec, labels: dict[str, str]) -> list[Launch]:
    """One launch per combination: `llmhost serve`, or `llmhost endpoint up` for several copies."""
    s = cfg.serve
    assert s is not None
    settings, swept = s.settings, s.given()
    launches = []
    for model, *values, copies in itertools.product(as_list(s.model), *swept.values(), as_list(s.copies)):
        given = dict(zip(swept, values, strict=True))
        params: dict[str, Any] = {"model": model, **given}
        parts = [labels[str(model)]]
        parts += [p for n, v in given.items() if (p := label(settings[n], v, len(swept[n]) > 1))]
        argv = [
            *llmhost_command(),
            "serve",
            str(model),
            *settings.argv({"host": HOST, "port": "{port}", **given}),
            *s.extra_args,
        ]
        if copies not in (None, 1):
            if s.extra_args:
                raise ValueError("extra_args apply to single `llmhost serve` configurations only")
            params["copies"] = copies
            parts.append(f"x{copies}")
            path = endpoint_file(
                "-".join(parts),
                str(model),
                copies,
                endpoint_engine(settings, given),
                given.get("threads"),
                s.router_cpus,
                endpoint_adapters(given),
            )
            argv = [*llmhost_command(), "endpoint", "up", str(path), "--host", HOST, "--port", "{port}"]
        name = "-".join(parts)
        launches.append(
            Launch(
                name=f"{cfg.name}-{name}" if cfg.name else name,
                kind="serve",
                argv=argv,
                params=params,
                spec=cfg,
            )
        )
    return launches


def expand(spec: SweepSpec) -> list[Launch]:
    launches: list[Launch] = []
    labels = model_labels(str(m) for c in spec.configurations if c.serve for m in as_list(c.serve.model))
    for i, cfg in enumerate(spec.configurations):
        if cfg.serve is not None:
            launches += _serve_launches(cfg, labels)
        elif cfg.command is not None:
            argv = shlex.split(cfg.command) if isinstance(cfg.command, str) else list(cfg.command)
            launches.append(
                Launch(
                    name=cfg.name or f"command{i}",
                    kind="command",
                    argv=argv,
                    params={"command": " ".join(argv)},
                    spec=cfg,
                )
            )
        else:
            launches.append(
                Launch(
                    name=cfg.name or str(cfg.url), kind="url", url=cfg.url, params={"url": cfg.url}, spec=cfg
                )
            )
    names = [launch.name for launch in launches]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"two configurations are named {name!r}; give them distinct names")
    return launches


def fill_placeholders(arg: str, port: int) -> str:
    """``{port}``, ``{host}``, ``{python}`` and ``{default_model}`` (the bundled GGUF's path)."""
    arg = arg.replace("{port}", str(port)).replace("{host}", HOST).replace("{python}", sys.executable)
    if "{default_model}" in arg:
        from llmhost.store.resolve import resolve_model

        arg = arg.replace("{default_model}", str(resolve_model("default")))
    return arg


def bench_config_for(spec: SweepSpec, launch: Launch, url: str) -> BenchConfig:
    c = launch.spec
    return BenchConfig(
        url=url,
        api=c.api or spec.api,
        concurrency=list(spec.concurrency),
        rates=spec.rates,
        burstiness=spec.burstiness,
        duration_s=spec.duration_s,
        requests=spec.requests,
        warmup=spec.warmup,
        timeout_s=spec.timeout_s,
        max_error_rate=spec.max_error_rate,
        prompt_tokens=spec.prompt_tokens,
        max_new_tokens=spec.max_new_tokens,
        temperature=spec.temperature,
        prompts_file=spec.prompts_file,
        builtin_prompts=spec.builtin_prompts,
        num_prompts=spec.num_prompts,
        workload=spec.workload,
        documents=spec.documents,
        document_words=spec.document_words,
        conversations_file=spec.conversations_file,
        turns=spec.turns,
        system_prompts=spec.system_prompts,
        system_prompt_tokens=spec.system_prompt_tokens,
        user_tokens=spec.user_tokens,
        think_time_s=spec.think_time_s,
        seed=spec.seed,
        price_per_hour=c.price_per_hour if c.price_per_hour is not None else spec.price_per_hour,
        discount=spec.discount,
        model=c.model_name,
        component=c.component,
        headers=dict(c.headers),
        name=launch.name,
        goodput=spec.goodput,
        slo_stop=spec.slo_stop,
        saturation_gain=spec.saturation_gain,
        server_metrics=spec.server_metrics,
        metrics_interval_s=spec.metrics_interval_s,
    )


@dataclass
class _Sweep:
    """What every configuration of one sweep shares."""

    spec: SweepSpec
    out: Path
    writer: ResultsWriter
    progress: Progress
    run_t0: float

    async def start(self, launch: Launch, cr: ConfigResult) -> ServerProcess:
        """The configuration's server, once it (and, for an endpoint, every copy) is ready."""
        port = free_port()
        argv = [fill_placeholders(a, port) for a in launch.argv]
        cr.url = f"http://{HOST}:{port}"
        self.progress.message(f"{launch.name}: starting {' '.join(argv)}")
        proc = ServerProcess(argv, launch.spec.env, self.out / "logs" / f"{launch.name}.log")
        startup_s = launch.spec.startup_timeout_s or self.spec.startup_timeout_s
        try:
            await proc.wait_ready(cr.url + (launch.spec.ready_path or self.spec.ready_path), startup_s)
            if launch.params.get("copies", 1) > 1:
                await proc.wait_all_copies(cr.url, startup_s)
        except BaseException:  # not ready, or the sweep cancelled meanwhile: nothing stays behind
            self.progress.message(f"{launch.name}: stopping")
            proc.stop()
            raise
        return proc

    async def measure(self, launch: Launch, cr: ConfigResult, proc: ServerProcess | None) -> None:
        cfg = bench_config_for(self.spec, launch, cr.url)
        cr.price_per_hour = cfg.price_per_hour
        cfg.validate()
        usage = ProcessUsage.start(proc.proc.pid) if proc is not None else None
        try:
            await measure_config(cfg, cr, self.writer.record, self.progress, self.run_t0)
        finally:
            cr.processes = usage.finish() if usage is not None else None

    async def run(self, launch: Launch, cr: ConfigResult) -> None:
        """Start (unless it is a URL), measure and stop one configuration; a failure is recorded."""
        proc: ServerProcess | None = None
        try:
            if launch.kind != "url":
                proc = await self.start(launch, cr)
            await self.measure(launch, cr, proc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one configuration failing does not end the sweep
            cr.error = f"{type(exc).__name__}: {exc}"
            self.progress.message(f"{launch.name}: failed: {cr.error.splitlines()[0]}")
        finally:
            if proc is not None:
                self.progress.message(f"{launch.name}: stopping")
                proc.stop()  # synchronous: must also run when the sweep is being cancelled
            self.writer.flush()


async def arun_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    progress: Progress | None = None,
    results: BenchResults | None = None,
) -> BenchResults:
    """Async form of :func:`run_sweep`; ``results`` is filled in place."""
    results = results if results is not None else BenchResults()
    launches = expand(spec)
    results.settings = spec.model_dump(mode="json")
    results.started_at = _now()
    out = Path(out_dir)
    sweep = _Sweep(spec, out, ResultsWriter(out), progress or NullProgress(), time.perf_counter())
    try:
        for launch in launches:
            cr = ConfigResult(
                launch.name, launch.url or "", launch.spec.api or spec.api, params=dict(launch.params)
            )
            results.configs.append(cr)
            await sweep.run(launch, cr)
    except asyncio.CancelledError:
        results.interrupted = True
        raise
    finally:
        finish_results(
            results,
            sweep.writer,
            at_concurrency=spec.at_concurrency,
            slo_ms_per_token=spec.slo_ms_per_token,
            slo_ttft_ms=spec.slo_ttft_ms,
        )
    return results


def run_sweep(spec: SweepSpec, out_dir: str | Path, progress: Progress | None = None) -> BenchResults:
    """Run a sweep and write its results directory; Ctrl-C writes what was measured and returns."""
    results = BenchResults()
    _, stopped = run_interruptible(arun_sweep(spec, out_dir, progress, results))
    results.interrupted = results.interrupted or stopped
    return results
