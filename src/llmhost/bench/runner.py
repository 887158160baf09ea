"""``run_benchmark``: measure one target at each load level and write the results directory."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from llmhost.bench.config import BenchConfig
from llmhost.bench.figures.metrics import LevelSummary, RequestRecord, summarize_level
from llmhost.bench.figures.recommend import recommend
from llmhost.bench.load.conversations import describe as describe_conversations
from llmhost.bench.load.convload import ConversationLoad
from llmhost.bench.load.http import Endpoint, prepare, simple_request
from llmhost.bench.load.images import ImageSettings
from llmhost.bench.load.loadgen import AnyTarget, LevelState, PreparedRequest, run_level
from llmhost.bench.load.retrieval import RetrievalTarget, retrieval_requests
from llmhost.bench.load.retrieval import describe as describe_retrieval
from llmhost.bench.load.server_metrics import MetricsProbe, metrics_path
from llmhost.bench.load.slostop import STOPPED as SLO_MISSED
from llmhost.bench.load.targets import Target
from llmhost.bench.load.workload import (
    Tokenizer,
    Workload,
    builtin_prompts,
    listed_workload,
    load_prompts_file,
    synthetic_workload,
)
from llmhost.bench.report import ResultsWriter
from llmhost.bench.results import BenchResults, ConfigResult
from llmhost.process.interrupt import run_interruptible


class Progress(Protocol):
    """What a live display is told (request counters are read from ``LevelState`` directly)."""

    def message(self, text: str) -> None: ...

    def level_started(self, state: LevelState) -> None: ...

    def level_finished(self, summary: LevelSummary) -> None: ...


class NullProgress:
    def message(self, text: str) -> None:
        pass

    def level_started(self, state: LevelState) -> None:
        pass

    def level_finished(self, summary: LevelSummary) -> None:
        pass


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def discover_model(endpoint: Endpoint) -> str | None:
    """The first model id of ``GET /v1/models``, if the server lists any."""
    try:
        status, body = await simple_request(f"{endpoint.base_url}/v1/models", "GET", None, 5.0)
        if status == 200:
            data = json.loads(body).get("data") or []
            if data and isinstance(data[0], dict) and isinstance(data[0].get("id"), str):
                return str(data[0]["id"])
    except Exception:
        return None
    return None


async def build_workload(cfg: BenchConfig, endpoint: Endpoint) -> Workload:
    tokenizer = await Tokenizer.probe(endpoint.base_url) if cfg.tokenize else None
    if cfg.prompts_file:
        return await listed_workload(
            load_prompts_file(cfg.prompts_file), f"file:{cfg.prompts_file}", tokenizer
        )
    if cfg.builtin_prompts:
        return await listed_workload(builtin_prompts(), "builtin", tokenizer)
    return await synthetic_workload(cfg.prompt_tokens, cfg.num_prompts, tokenizer)


def api_path(endpoint: Endpoint, target: AnyTarget) -> str:
    """The API route under the URL's prefix (unless the URL already names it)."""
    return endpoint.prefix if endpoint.prefix.endswith(target.path) else endpoint.prefix + target.path


def prepare_requests(
    endpoint: Endpoint,
    target: Target,
    workload: Workload,
    max_new_tokens: int,
    images: ImageSettings | None = None,
) -> list[PreparedRequest]:
    """The workload's requests, encoded once; with ``images``, prompt i carries its images."""
    path = api_path(endpoint, target)
    mix = target.mix()
    images = images or ImageSettings()
    out = []
    for i, p in enumerate(workload.prompts):
        label, t = mix[i % len(mix)]  # in a mix, prompt i names model i mod n: each level sends them in turn
        body = json.dumps(t.body(p.text, p.max_new_tokens or max_new_tokens, images.for_request(i))).encode()
        http = prepare(endpoint, "POST", path, body, t.headers())
        out.append(PreparedRequest(http, p.tokens, label, images=images.count))
    return out


def prepare_retrieval(cfg: BenchConfig, endpoint: Endpoint, target: RetrievalTarget) -> list[PreparedRequest]:
    """The embed or rerank requests, encoded once; their token counts come from the answers' usage."""
    path = api_path(endpoint, target)
    out = []
    for req in retrieval_requests(cfg.retrieval_settings()):
        body = json.dumps(target.body(req.texts, req.query)).encode()
        http = prepare(endpoint, "POST", path, body, target.headers())
        out.append(PreparedRequest(http, 0, items=len(req.texts)))
    return out


@dataclass
class _Run:
    """What every level of one configuration shares."""

    cfg: BenchConfig
    endpoint: Endpoint
    target: AnyTarget
    sink: Any
    progress: Progress
    run_t0: float
    probe: MetricsProbe | None


async def measure_config(
    cfg: BenchConfig,
    result: ConfigResult,
    sink: Any,
    progress: Progress,
    run_t0: float,
) -> bool:
    """Measure every level of ``cfg`` into ``result.levels``; False when the run must stop
    (error-rate bound passed). Levels stop early at saturation (recorded in ``result``). On
    cancellation the level in progress is summarised first."""
    endpoint = Endpoint.parse(cfg.url)
    target, requests = await _prepare(cfg, endpoint, result, progress)
    probe = None
    if cfg.server_metrics:
        path = metrics_path(endpoint, target.path)
        probe = MetricsProbe(endpoint, path, cfg.headers, cfg.metrics_interval_s)
    run = _Run(cfg, endpoint, target, sink, progress, run_t0, probe)
    levels = cfg.levels()
    rule = cfg.saturation()
    for i, (label, conc, rate) in enumerate(levels):
        summary, sent = await _measure_level(run, result, requests, label, conc, rate)
        if not isinstance(requests, ConversationLoad):
            requests = rotate(requests, sent)
        if summary.stopped == "error_rate":
            detail = f"error rate above {cfg.max_error_rate:g} at {label}"
            _stop(result, "error_rate", detail, levels[i + 1 :])
            progress.message(f"{cfg.name}: {detail}; stopping")
            return False
        if summary.stopped == SLO_MISSED:
            detail = f"{label} cannot meet the SLO ({summary.stop_detail})"
            _stop(result, SLO_MISSED, detail, levels[i + 1 :])
            progress.message(f"{cfg.name}: {detail}; not raising the load further")
            return True
        why = rule.check(result.levels) if rule is not None else None
        if why is not None:
            result.saturated_at = result.saturated_at or label
            if i + 1 < len(levels):
                _stop(result, "saturated", why, levels[i + 1 :])
                progress.message(f"{cfg.name}: saturated ({why}); not raising the load further")
                return True
    return True


Load = list[PreparedRequest] | ConversationLoad  # what a configuration's levels send


async def _prepare(
    cfg: BenchConfig, endpoint: Endpoint, result: ConfigResult, progress: Progress
) -> tuple[AnyTarget, Load]:
    """The target (its model discovered when not given) and the encoded requests of the workload, or
    its conversations."""
    model = cfg.model
    if model is None and (cfg.retrieves or cfg.api in ("openai", "chat", "messages", "responses")):
        model = await discover_model(endpoint)
    if cfg.retrieves:
        retrieval = RetrievalTarget(cfg.workload, model, tuple(cfg.headers.items()))
        if model:
            result.params.setdefault("model_name", model)
        requests = prepare_retrieval(cfg, endpoint, retrieval)
        result.workload = describe_retrieval(cfg.retrieval_settings())
        return retrieval, requests
    target = Target(
        cfg.api,
        model=model,
        component=cfg.component,
        ignore_eos=cfg.ignore_eos,
        temperature=cfg.temperature,
        extra_headers=tuple(cfg.headers.items()),
    )
    if model:
        result.params.setdefault("model_name", model)
    if cfg.holds_conversations:
        settings = cfg.conversation_settings()
        load = ConversationLoad(endpoint, target, api_path(endpoint, target), settings, cfg.max_new_tokens)
        result.workload = describe_conversations(settings, load.next_level(max(cfg.concurrency)))
        load.next_user = 0
        return target, load
    progress.message(f"{cfg.name}: preparing prompts")
    workload = await build_workload(cfg, endpoint)
    images = cfg.image_settings()
    result.workload = workload.describe() | (images.describe() if images.count else {})
    return target, prepare_requests(endpoint, target, workload, cfg.max_new_tokens, images)


def _stop(result: ConfigResult, reason: str, detail: str, rest: list[tuple[str, Any, Any]]) -> None:
    result.stopped = reason
    result.skipped_levels = [label for label, _, _ in rest]
    result.stop_detail = detail + (f"; skipped {', '.join(result.skipped_levels)}" if rest else "")


async def _measure_level(
    run: _Run,
    result: ConfigResult,
    requests: Load,
    label: str,
    conc: int | None,
    rate: float | None,
) -> tuple[LevelSummary, int]:
    """One level, summarised into ``result.levels``; returns it and how many requests were sent."""
    cfg = run.cfg
    records: list[RequestRecord] = []

    def collect(rec: RequestRecord) -> None:
        records.append(rec)
        run.sink(rec)

    if isinstance(requests, ConversationLoad):
        assert conc is not None  # validated: conversations are closed-loop users
        convs = requests.next_level(conc)
        settings = cfg.load_settings(sum(len(c.messages) for c in convs))
    else:
        settings = cfg.load_settings()
    state = LevelState(cfg.name, label, settings)
    run.progress.level_started(state)
    probe = run.probe
    before = probe.begin if probe else None
    try:
        if isinstance(requests, ConversationLoad):
            outcome = await requests.run_level(convs, settings, state, collect, run.run_t0, before)
        else:
            outcome = await run_level(
                run.target,
                requests,
                settings,
                state,
                collect,
                run.run_t0,
                concurrency=conc,
                rate_rps=rate,
                before_measured=before,
            )
    except BaseException as exc:
        if probe is not None:
            await probe.stop()
        if isinstance(exc, asyncio.CancelledError):
            wall = time.perf_counter() - state.started_at
            if any(not r.warmup for r in records):
                result.levels.append(_summary(cfg, label, conc, rate, records, wall, "interrupted"))
            result.stopped = "interrupted"
        raise
    summary = _summary(cfg, label, conc, rate, records, outcome.wall_s, outcome.stopped)
    summary.stop_detail = outcome.stop_detail
    if isinstance(requests, ConversationLoad):
        summary.conversations = dict(requests.counts)
    if probe is not None:
        summary.server_figures, summary.server_metrics = await probe.end()
    result.levels.append(summary)
    run.progress.level_finished(summary)
    return summary, len(records)


def rotate(requests: list[PreparedRequest], sent: int) -> list[PreparedRequest]:
    """The next level starts with the prompts this one did not send, so a server's prompt cache
    cannot answer it from an earlier level (when there are enough distinct prompts)."""
    k = sent % len(requests) if requests else 0
    return requests[k:] + requests[:k]


def _summary(
    cfg: BenchConfig,
    label: str,
    conc: int | None,
    rate: float | None,
    records: list[RequestRecord],
    wall: float,
    stopped: str | None,
) -> LevelSummary:
    return summarize_level(
        records,
        config=cfg.name,
        level=label,
        mode="closed" if conc is not None else "open",
        concurrency=conc,
        rate_rps=rate,
        wall_s=wall,
        price_per_hour=cfg.price_per_hour,
        discount=cfg.discount,
        stopped=stopped,
        slo=cfg.slo(),
    )


def finish_results(
    results: BenchResults,
    writer: ResultsWriter | None,
    *,
    at_concurrency: float | None,
    slo_ms_per_token: float | None,
    slo_ttft_ms: float | None,
) -> None:
    results.finished_at = _now()
    results.recommendations = recommend(
        results.configs,
        at_concurrency=at_concurrency,
        slo_ms_per_token=slo_ms_per_token,
        slo_ttft_ms=slo_ttft_ms,
    )
    if writer is not None:
        writer.finalize(results)


async def arun_benchmark(
    cfg: BenchConfig,
    out_dir: str | Path | None = None,
    progress: Progress | None = None,
    results: BenchResults | None = None,
) -> BenchResults:
    """Async form of :func:`run_benchmark`. ``results`` (optional) is filled in place, so a caller
    keeps what was measured even when this coroutine is cancelled."""
    cfg.validate()
    progress = progress or NullProgress()
    results = results if results is not None else BenchResults()
    results.settings = cfg.to_json()
    results.started_at = _now()
    writer = ResultsWriter(out_dir) if out_dir is not None else None
    sink = writer.record if writer is not None else (lambda rec: None)
    result = ConfigResult(cfg.name, cfg.url, cfg.api, params={}, price_per_hour=cfg.price_per_hour)
    results.configs.append(result)
    try:
        await measure_config(cfg, result, sink, progress, time.perf_counter())
    except asyncio.CancelledError:
        results.interrupted = True
        raise
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        finish_results(
            results,
            writer,
            at_concurrency=cfg.at_concurrency,
            slo_ms_per_token=cfg.slo_ms_per_token,
            slo_ttft_ms=cfg.slo_ttft_ms,
        )
    return results


def run_benchmark(
    cfg: BenchConfig, out_dir: str | Path | None = None, progress: Progress | None = None
) -> BenchResults:
    """Measure ``cfg.url`` at each level of ``cfg``; write the results directory when ``out_dir`` is
    given. Ctrl-C stops the run: what was measured is written and returned with ``interrupted``."""
    results = BenchResults()
    _, stopped = run_interruptible(arun_benchmark(cfg, out_dir, progress, results))
    results.interrupted = results.interrupted or stopped
    return results
