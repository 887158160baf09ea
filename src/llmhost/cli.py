"""`llmhost` command line."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from llmhost.bench.cli import app as bench_app
from llmhost.endpoint.cli import app as endpoint_app
from llmhost.optimize.cli import app as optimize_app
from llmhost.store.options import S3EndpointOpt, use_s3_endpoint
from llmhost.tune.cli import tune

if TYPE_CHECKING:
    from llmhost.server import ServerSettings

app = typer.Typer(help="Self-hosted, CPU-first LLM endpoints over llama.cpp.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
app.add_typer(endpoint_app, name="endpoint")
app.add_typer(optimize_app, name="optimize")
app.command()(tune)  # its heavy modules (the tuner, matplotlib, llama.cpp's quantizer) load inside


@app.callback()
def _main() -> None:
    """llmhost: serve GGUF models with SageMaker, OpenAI and TGI APIs."""


@app.command()
def serve(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Argument(
            help="A .gguf file, a directory holding one, s3://bucket/prefix/, s3://bucket/model.tar.gz "
            "(downloaded once into ~/.cache/llmhost/models, or $LLMHOST_CACHE), or 'default'. "
            "Unset: $SM_MODEL_DIR, /opt/ml/model if present, else the bundled Gemma 3 270M."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port; env SAGEMAKER_BIND_TO_PORT.")] = 0,
    threads: Annotated[int, typer.Option(help="Engine threads; 0: the CPUs this process may run on.")] = 0,
    max_concurrent: Annotated[
        int, typer.Option(help="Sequences decoding together; env MAX_CONCURRENT_REQUESTS.")
    ] = 0,
    max_queue: Annotated[int, typer.Option(help="Requests that may wait beyond those; more get 429.")] = 64,
    max_input_tokens: Annotated[int, typer.Option(help="Prompt token limit; env MAX_INPUT_LENGTH.")] = 0,
    max_total_tokens: Annotated[
        int, typer.Option(help="Prompt + new tokens limit; env MAX_TOTAL_TOKENS.")
    ] = 0,
    max_batch_tokens: Annotated[
        int, typer.Option(help="Tokens per decode step; env MAX_BATCH_TOTAL_TOKENS.")
    ] = 0,
    prefix_cache_tokens: Annotated[int, typer.Option(help="KV tokens kept for idle cached prefixes.")] = 4096,
    flash_attn: Annotated[bool, typer.Option(help="llama.cpp flash attention.")] = True,
    speculative: Annotated[
        str, typer.Option(help="Speculative decoding of greedy requests: 'ngram' (prompt lookup) or ''.")
    ] = "",
    draft_tokens: Annotated[int, typer.Option(help="Speculative tokens verified per step.")] = 12,
    draft_model: Annotated[
        str, typer.Option(help="Draft GGUF sharing the model's vocabulary (implies --speculative draft).")
    ] = "",
    ngram_size: Annotated[int, typer.Option(help="Longest n-gram looked up for drafts.")] = 3,
    chat_template: Annotated[
        Path | None, typer.Option(help="Jinja chat template file overriding the GGUF's.")
    ] = None,
    served_model_name: Annotated[str, typer.Option(help="Model name in API responses.")] = "",
    tool_parser: Annotated[
        str, typer.Option(help="Format of tool calls in chat output: auto (from the template), hermes, "
                          "llama3, mistral.")
    ] = "auto",
    api_key: Annotated[
        list[str] | None,
        typer.Option(help="Require this API key (repeatable; also $LLMHOST_API_KEYS, comma-separated); "
                     "/ping and /health stay open.", show_default=False),
    ] = None,
    api_key_file: Annotated[Path | None, typer.Option(help="File of API keys, one per line.")] = None,
    queue_timeout_s: Annotated[
        float, typer.Option(help="Seconds a request may wait for a sequence slot; then 503. 0: no limit.")
    ] = 0.0,
    request_timeout_s: Annotated[
        float, typer.Option(help="Seconds a request may take in all; then 503 / an error event. 0: no limit.")
    ] = 0.0,
    shutdown_grace_s: Annotated[
        float, typer.Option(help="On SIGTERM, seconds requests in flight get to finish before exit.")
    ] = 25.0,
    embeddings: Annotated[
        bool, typer.Option("--embeddings", help="Load the model for OpenAI /v1/embeddings only (no text "
                           "generation); inputs up to --max-input-tokens (default 512 here).")
    ] = False,
    pooling: Annotated[
        str, typer.Option(help="With --embeddings: auto (the model's own, mean if it has none), mean, cls, "
                          "last.")
    ] = "auto",
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Serve a GGUF model on one replica (SageMaker / OpenAI / TGI APIs)."""
    # imported here: they load llama.cpp, which `llmhost bench` does not need
    from llmhost.auth import load_keys
    from llmhost.serve_settings import ServeOptions, build

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    use_s3_endpoint(s3_endpoint_url)
    sources = {k: ctx.get_parameter_source(k) for k in ctx.params}
    given = frozenset(k for k, src in sources.items() if src is not None and src.name != "DEFAULT")
    try:
        opts = ServeOptions(
            model=model, host=host, port=port, threads=threads, max_concurrent=max_concurrent,
            max_queue=max_queue, max_input_tokens=max_input_tokens, max_total_tokens=max_total_tokens,
            max_batch_tokens=max_batch_tokens, prefix_cache_tokens=prefix_cache_tokens,
            flash_attn=flash_attn, speculative=speculative, draft_tokens=draft_tokens,
            draft_model=draft_model, ngram_size=ngram_size,
            chat_template=chat_template.read_text() if chat_template else None,
            served_model_name=served_model_name, tool_parser=tool_parser, queue_timeout_s=queue_timeout_s,
            request_timeout_s=request_timeout_s, embeddings=embeddings, pooling=pooling,
            api_keys=load_keys(api_key or [], api_key_file), explicit=given,
        )  # fmt: skip
        built = build(opts)
    except (ValueError, OSError) as exc:  # a model not found is an OSError (FileNotFoundError)
        raise typer.BadParameter(str(exc)) from exc
    for note in built.notes:
        typer.echo(f"llmhost: {note}")
    settings = built.settings
    engine = settings.engine
    shape = f"{engine.max_concurrent} sequences x {engine.max_total_tokens} tokens"
    if settings.embeddings is not None:
        shape = f"embeddings only, inputs up to {settings.embeddings.max_input_tokens} tokens"
    typer.echo(f"llmhost: serving {settings.model_path} on {settings.host}:{settings.port} "
               f"({engine.threads} threads, {shape})")
    code = run_server(settings, shutdown_grace_s, log_level)
    if code:
        raise typer.Exit(code)


def run_server(settings: ServerSettings, grace_s: float, log_level: str) -> int:
    """Serve until drained after SIGTERM (0) or until the engine dies (1); returns the exit status."""
    import uvicorn

    from llmhost.lifecycle import GracefulServer, Lifecycle
    from llmhost.server import create_app
    from llmhost.server.custom_code import CustomCodeError

    try:
        lifecycle = Lifecycle(grace_s)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        asgi_app = create_app(settings, lifecycle=lifecycle)
    except CustomCodeError as exc:
        typer.echo(f"llmhost: cannot start: {exc}", err=True)
        return 1
    config = uvicorn.Config(
        asgi_app,
        host=settings.host,
        port=settings.port,
        log_level=log_level.lower(),
        # requests were drained already; this bounds the wait for responses still being written
        timeout_graceful_shutdown=5,
    )
    GracefulServer(config, lifecycle).run()
    return lifecycle.exit_code


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


def sagemaker_serve() -> None:
    """The `serve` executable SageMaker runs in a bring-your-own container (`docker run IMAGE serve`):
    `llmhost serve` of $SM_MODEL_DIR or /opt/ml/model on $SAGEMAKER_BIND_TO_PORT or 8080; any
    arguments are `llmhost serve`'s."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # an app of one command: its usage line reads `serve [OPTIONS] [MODEL]`, not `serve serve`
    single = typer.Typer(add_completion=False)
    single.command(help=serve.__doc__)(serve)
    single(sys.argv[1:], prog_name="serve")


if __name__ == "__main__":
    main()
