"""`llmhost tune`: its command line.

It lives at the CLI layer because quantized candidates are made with :mod:`llmhost.optimize`
(llama.cpp); the tuner itself measures over HTTP only. Heavy modules are imported inside.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmhost.process.interrupt import run_interruptible
from llmhost.settings.cli import grouped
from llmhost.store.options import S3EndpointOpt, use_s3_endpoint
from llmhost.tune.options import (
    AdapterOptions,
    ConversationOptions,
    OutputOptions,
    SearchOptions,
    SloOptions,
    WorkloadOptions,
)

if TYPE_CHECKING:
    from llmhost.tune import TuneSettings
    from llmhost.tune.state import CandidateRecord


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
    mix = doc["workload"]["model_mix"]
    if doc["adapters"] or mix:
        typer.echo(
            f"adapters: {', '.join(a['name'] for a in doc['adapters']) or 'none'}; requests named in "
            f"turn: {', '.join(mix) if mix else 'model (the base model)'}"
        )
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


@grouped(
    slo=SloOptions,
    output=OutputOptions,
    work=WorkloadOptions,
    talk=ConversationOptions,
    search=SearchOptions,
    lora=AdapterOptions,
)
def tune(
    model: Annotated[
        str, typer.Argument(help="A .gguf file, a directory holding one, an s3:// reference, or 'default'.")
    ],
    *,
    slo: SloOptions,
    output: OutputOptions,
    work: WorkloadOptions,
    talk: ConversationOptions,
    search: SearchOptions,
    lora: AdapterOptions,
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Find the deployment with the most goodput under an SLO on this host; write an endpoint file.

    Searches copies × threads × max_concurrent × max_batch_tokens (and quantization, speculation),
    measuring each candidate with `llmhost bench` on servers it starts (each loading the --lora
    adapters, the load naming --model-mix in turn); writes endpoint.yaml, tune.json and report.html
    into --out."""
    from llmhost.tune import TuneSettings

    started = time.monotonic()  # the budget counts from here: quantizing candidates is part of it
    use_s3_endpoint(s3_endpoint_url)  # the candidates' servers inherit it
    try:
        space, workload, adapters = search.space(), work.build(talk), lora.adapters()
        output.out.mkdir(parents=True, exist_ok=True)
        models = quantized_models(model, search.quantize or [], output.out, search.allow_requantize)
        settings = TuneSettings(
            models=models,
            space=space,
            slo=slo.slo(),
            price_per_hour=slo.price_per_hour,
            out_dir=output.out,
            workload=workload,
            max_minutes=output.max_minutes,
            saturation_gain=search.saturation_gain,
            prune_ratio=search.prune_ratio,
            started_at=started,
            adapters=adapters,
        )
    except (ValueError, FileNotFoundError) as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(run_tune(settings))
