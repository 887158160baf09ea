"""`llmhost tune`: its command line.

It lives at the CLI layer because quantized candidates are made with :mod:`llmhost.optimize`
(llama.cpp); the tuner itself measures over HTTP only. Heavy modules are imported inside.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmhost.bench.conversations import ConversationSettings, parse_think_time
from llmhost.interrupt import run_interruptible
from llmhost.store.options import S3EndpointOpt, use_s3_endpoint

CONVERSATIONS = ConversationSettings()  # the conversation options' defaults
THINK_TIME = "{:g},{:g}".format(*CONVERSATIONS.think_time_s)

if TYPE_CHECKING:
    from llmhost.tune import TuneSettings
    from llmhost.tune.state import CandidateRecord


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError as exc:
        raise typer.BadParameter(f"{flag}: comma-separated integers, e.g. 1,2,4") from exc
    return values


def quantized_models(
    model: str, types: list[str], out: Path, allow_requantize: bool
) -> dict[str | None, str]:
    """The model as given, and one GGUF per quantization type written into ``out``."""
    models: dict[str | None, str] = {None: model}
    if not types:
        return models
    from llmhost.optimize.quantize import quantize
    from llmhost.store import resolve_model

    source = resolve_model(model)
    for qtype in types:
        dst = out / f"model-{qtype}.gguf"
        typer.echo(f"quantizing {source.name} to {qtype} → {dst}")
        quantize(source, dst, qtype, allow_requantize=allow_requantize)
        models[qtype] = str(dst)
    return models


def print_answer(doc: dict[str, Any]) -> int:
    """The answer in the terminal; the exit status (1: nothing met the SLO)."""
    a = doc["answer"]
    typer.echo(f"\nSLO: {doc['slo']['describe']}")
    for label, p in (
        ("highest goodput", a["chosen"]),
        ("cheapest per 1M tokens", a["cheapest"]),
        ("baseline, best goodput", a["baseline"]["best_goodput"]),
        ("baseline, cheapest", a["baseline"]["cheapest"]),
    ):
        if p is None:
            typer.echo(f"  {label}: none met the SLO")
            continue
        cost = p["cost_per_1m_tokens_usd"]
        typer.echo(
            f"  {label}: {p['name']} at {p['level']}: {p['goodput_rps']:.2f} req/s goodput, "
            f"{p['output_tokens_per_s']:.1f} output tok/s, "
            f"{'–' if cost is None else format(cost, '.4f')} per 1M tokens"
        )
    for key, what in (("goodput_vs_baseline", "goodput"), ("cost_vs_baseline", "cost per 1M tokens")):
        ratio = a[key]
        shown = "n/a (the baseline missed the SLO)" if ratio is None else f"×{ratio:.2f}"
        typer.echo(f"  {what} vs baseline: {shown}")
    if a["chosen"] is None:
        typer.echo("no candidate met the SLO: no endpoint file written")
        return 1
    typer.echo(f"endpoint file: {doc['endpoint_file']}")
    return 0


def run_tune(settings: TuneSettings) -> int:
    from rich.console import Console

    from llmhost.bench.cli import LiveProgress
    from llmhost.tune import Tuner
    from llmhost.tune.outputs import TUNE_JSON, write_outputs

    started = datetime.now(UTC).isoformat(timespec="seconds")
    last: dict[str, Any] = {}

    def save(records: list[CandidateRecord]) -> None:
        last.update(write_outputs(settings, records, started))

    with LiveProgress(Console(stderr=True)) as progress:
        tuner = Tuner(settings, save, progress)
        # Ctrl-C marks the tuner interrupted as well as cancelling it: it stops before the next
        # candidate even where a library swallowed the cancellation
        run_interruptible(tuner.run(), tuner.interrupt)
        if tuner.interrupted:
            typer.echo(f"interrupted: what was measured is in {settings.out_dir / TUNE_JSON}")
            if last:
                print_answer(last)
            return 130  # as a shell reports a command ended by Ctrl-C
    return print_answer(last) if last else 1


def tune(
    model: Annotated[
        str, typer.Argument(help="A .gguf file, a directory holding one, an s3:// reference, or 'default'.")
    ],
    slo_ttft_ms: Annotated[float, typer.Option(help="SLO: time to first token bound (ms).")],
    slo_itl_ms: Annotated[
        float,
        typer.Option("--slo-itl-ms", "--slo-tpot-ms",
                     help="SLO: time per output token after the first (TPOT, ms): `llmhost bench --goodput "
                     "tpot:MS`, not bench's `itl` (a request's longest gap)."),
    ],
    price_per_hour: Annotated[float, typer.Option(help="Price of this host per hour (cost per 1M tokens).")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory for endpoint.yaml, tune.json, report.html.")
    ],
    slo_percentile: Annotated[
        int, typer.Option(help="Percentile the SLO bounds apply at: 50, 90 or 99.")
    ] = 90,
    max_minutes: Annotated[float, typer.Option(help="Time budget for the whole search.")] = 30.0,
    prompts_file: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="JSONL prompts instead of the built-in set."),
    ] = None,
    prompt_tokens: Annotated[int | None, typer.Option(help="Synthetic prompts of this many tokens.")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens generated per request.")] = 64,
    num_prompts: Annotated[
        int | None, typer.Option(help="Distinct synthetic prompts (with --prompt-tokens; default 32).")
    ] = None,
    requests: Annotated[
        int | None, typer.Option(help="Measured requests per load level (prompts workload; default 16).")
    ] = None,
    warmup: Annotated[
        int | None,
        typer.Option(help="Warm-up requests per level, not measured (prompts workload; default 1)."),
    ] = None,
    workload: Annotated[
        str, typer.Option(help="prompts, or conversations: each --concurrency level counts users holding "
                          "multi-turn conversations (see `llmhost bench run --help`).")
    ] = "prompts",
    conversations_file: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Conversations: JSONL conversations "
                                  "instead of generated ones.")
    ] = None,
    turns: Annotated[int, typer.Option(help="Conversations: turns per user.")] = CONVERSATIONS.turns,
    think_time: Annotated[
        str, typer.Option(help="Conversations: think time before each turn, uniform in MIN,MAX seconds.")
    ] = THINK_TIME,
    system_prompts: Annotated[
        int, typer.Option(help="Conversations: distinct system prompts shared by groups of users.")
    ] = CONVERSATIONS.system_prompts,
    system_prompt_tokens: Annotated[
        int, typer.Option(help="Conversations: approximate tokens of each system prompt.")
    ] = CONVERSATIONS.system_prompt_tokens,
    user_tokens: Annotated[
        int, typer.Option(help="Conversations: approximate tokens of each user message.")
    ] = CONVERSATIONS.user_tokens,
    concurrency: Annotated[str, typer.Option(help="Load levels, rising; stops at saturation.")] = "1,2,4,8",
    copies: Annotated[str, typer.Option(help="Copies to try (more than 1: an endpoint).")] = "1",
    threads: Annotated[
        str, typer.Option(help="Threads per copy to try; default 1, 2, 4, ... all CPUs.")
    ] = "",
    max_concurrent: Annotated[str, typer.Option(help="max_concurrent values to try.")] = "1,4,8",
    max_batch_tokens: Annotated[str, typer.Option(help="max_batch_tokens values to try.")] = "512",
    quantize: Annotated[
        list[str] | None, typer.Option(help="Also try the model quantized to this type (repeatable).")
    ] = None,
    allow_requantize: Annotated[bool, typer.Option(help="Allow quantizing a quantized model.")] = False,
    speculative: Annotated[bool, typer.Option(help="Also try `--speculative ngram` (single copy).")] = False,
    router_cpus: Annotated[
        int,
        typer.Option(
            help="CPUs kept for the endpoint router when copies > 1 (its endpoint file's router.num_cpus; "
            "0: the router shares the copies' CPUs, its cost measured inside each candidate's figures)."
        ),
    ] = 0,
    saturation_gain: Annotated[float, typer.Option(help="Stop raising the load below this gain.")] = 0.05,
    prune_ratio: Annotated[
        float, typer.Option(help="Prune regions below this share of the best goodput.")
    ] = 0.8,
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Find the deployment with the most goodput under an SLO on this host; write an endpoint file.

    Searches copies × threads × max_concurrent × max_batch_tokens (and quantization, speculation),
    measuring each candidate with `llmhost bench` on servers it starts; writes endpoint.yaml,
    tune.json and report.html into --out."""
    from llmhost.tune import SearchSpace, TuneSettings, TuneSLO, Workload

    started = time.monotonic()  # the budget counts from here: quantizing candidates is part of it
    use_s3_endpoint(s3_endpoint_url)  # the candidates' servers inherit it
    try:
        if num_prompts is not None and prompt_tokens is None:
            raise ValueError("--num-prompts applies to synthetic prompts: give --prompt-tokens too")
        space = SearchSpace(
            host_cpus=len(os.sched_getaffinity(0)),
            copies=_ints(copies, "--copies"),
            threads=_ints(threads, "--threads"),
            max_concurrent=_ints(max_concurrent, "--max-concurrent"),
            max_batch_tokens=_ints(max_batch_tokens, "--max-batch-tokens"),
            quants=(None, *(quantize or [])),
            speculative=(False, True) if speculative else (False,),
            router_cpus=router_cpus,
        )
        talk = None
        if workload == "conversations":
            if requests is not None or warmup is not None:
                raise ValueError("--requests and --warmup apply to the prompts workload: a level of "
                                 "conversations is its users' turns")  # fmt: skip
            talk = ConversationSettings(
                turns=turns, system_prompts=system_prompts, system_prompt_tokens=system_prompt_tokens,
                user_tokens=user_tokens, think_time_s=parse_think_time(think_time),
                file=str(conversations_file) if conversations_file else None,
            )  # fmt: skip
        elif workload != "prompts":
            raise ValueError(f"--workload: prompts or conversations, got {workload!r}")
        workload_ = Workload(
            prompts_file=str(prompts_file) if prompts_file else None,
            prompt_tokens=prompt_tokens,
            max_new_tokens=max_new_tokens,
            num_prompts=num_prompts or 32,
            concurrency=_ints(concurrency, "--concurrency"),
            requests=16 if requests is None else requests,
            warmup=1 if warmup is None else warmup,
            conversations=talk,
        )
        slo = TuneSLO(slo_ttft_ms, slo_itl_ms, slo_percentile)
        out.mkdir(parents=True, exist_ok=True)
        models = quantized_models(model, quantize or [], out, allow_requantize)
        settings = TuneSettings(
            models=models, space=space, slo=slo, price_per_hour=price_per_hour, out_dir=out,
            workload=workload_, max_minutes=max_minutes, saturation_gain=saturation_gain,
            prune_ratio=prune_ratio, started_at=started,
        )  # fmt: skip
    except (ValueError, FileNotFoundError) as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(run_tune(settings))
