"""`llmhost batch`: a batch file run to its end (OpenAI's batch input format)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from llmhost.offline.client import BatchApiError
from llmhost.offline.run import BatchRun, run
from llmhost.store.options import S3EndpointOpt, use_s3_endpoint

# options after `--` are the local server's (`llmhost serve`'s own)
CONTEXT_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def batch(
    ctx: typer.Context,
    input: Annotated[
        str, typer.Argument(help="The batch file (JSON Lines, OpenAI's batch format): a path or s3://.")
    ],
    output: Annotated[
        str,
        typer.Argument(help="Where the answers go, one line per request in input order: a path or s3://."),
    ],
    url: Annotated[
        str | None,
        typer.Option(help="A running llmhost server or endpoint; unset: MODEL is served for the run."),
    ] = None,
    model: Annotated[
        str, typer.Option(help="The model served for the run when --url is unset (as `llmhost serve`).")
    ] = "default",
    api_key: Annotated[str, typer.Option(envvar="LLMHOST_API_KEY", help="The key the server asks for.")] = "",
    work_dir: Annotated[
        Path | None,
        typer.Option(
            help="What a run keeps to resume (default: one folder per input and target under the user's "
            "data directory)."
        ),
    ] = None,
    price_per_hour: Annotated[
        float, typer.Option(help="The host's price, for the summary's cost per 1M tokens.")
    ] = 0.0,
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Run a batch file to its end against a server, an endpoint or a local model; run it again after an
    interruption and it resumes. Options after `--` go to the local `llmhost serve`."""
    if url and ctx.args:
        raise typer.BadParameter(f"options for a local server ({' '.join(ctx.args)}) with --url")
    use_s3_endpoint(s3_endpoint_url)
    job = BatchRun(
        input,
        output,
        url=url,
        model=model,
        serve_args=tuple(ctx.args),
        api_key=api_key,
        work_dir=work_dir,
        price_per_hour=price_per_hour,
    )
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("batch", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        try:
            summary = run(job, progress)
        except (BatchApiError, ValueError, RuntimeError, OSError) as exc:
            typer.echo(f"llmhost batch: {exc}", err=True)
            raise typer.Exit(1) from exc
    cost = (
        f", ${summary.cost_per_1m_tokens:.4f} per 1M output tokens"
        if summary.cost_per_1m_tokens is not None
        else ""
    )
    typer.echo(
        f"batch {summary.batch_id} {summary.status}: {summary.completed} answered, {summary.failed} refused, "
        f"in {summary.seconds:.1f} s; {summary.output_tokens} output tokens, "
        f"{summary.tokens_per_s:.1f} tokens/s{cost}; written to {output}"
    )
    if summary.status != "completed":
        raise typer.Exit(1)
