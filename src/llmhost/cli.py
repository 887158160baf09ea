"""`llmhost` command line."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmhost.bench.cli import app as bench_app
from llmhost.endpoint.cli import app as endpoint_app
from llmhost.optimize.cli import app as optimize_app
from llmhost.store.options import S3EndpointOpt, use_s3_endpoint
from llmhost.tune_cli import tune

if TYPE_CHECKING:
    from llmhost.engine import EngineConfig
    from llmhost.optimize.artifact import ServeHints
    from llmhost.server import ServerSettings
    from llmhost.store import ResolvedModel

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
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    use_s3_endpoint(s3_endpoint_url)
    resolved, draft_path = _resolve_models(model, draft_model)
    flags = ctx.params
    hints, recipe_serving = _artifact_settings(ctx, resolved, flash_attn)
    try:
        engine = _engine_config(flags, hints, recipe_serving, draft_path)
        settings = _server_settings(flags, engine, resolved)
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    shape = f"{engine.max_concurrent} sequences x {engine.max_total_tokens} tokens"
    if settings.embeddings is not None:
        shape = f"embeddings only, inputs up to {settings.embeddings.max_input_tokens} tokens"
    typer.echo(f"llmhost: serving {resolved.gguf} on {settings.host}:{settings.port} ({engine.threads} "
               f"threads, {shape})")  # fmt: skip
    code = run_server(settings, shutdown_grace_s, log_level)
    if code:
        raise typer.Exit(code)


def _resolve_models(model: str | None, draft_model: str) -> tuple[ResolvedModel, str]:
    """The model (with its directory: inference.py and artifact files are found there, whatever the
    reference's form) and the draft model's file; a reference that names nothing is a usage error."""
    from llmhost.store import ModelNotFoundError, resolve

    try:
        resolved = resolve(model)
        draft_path = str(resolve(draft_model).gguf) if draft_model else ""
    except ModelNotFoundError as exc:
        raise typer.BadParameter(str(exc)) from exc
    return resolved, draft_path


def _artifact_settings(
    ctx: typer.Context, resolved: ResolvedModel, flash_attn: bool
) -> tuple[ServeHints | None, dict[str, Any]]:
    """An `llmhost optimize artifact` directory's measured load mode and saved system-prompt state, and
    its recipe's serving settings (speculative decoding) that were not given as flags."""
    from llmhost.optimize.artifact import SERVING_KEYS, serving_hints

    if resolved.model_dir is None:
        return None, {}
    hints = serving_hints(resolved.model_dir, flash_attn)
    if hints is None:
        return None, {}
    if hints.reason:
        typer.echo(f"llmhost: artifact's saved system-prompt state not used: {hints.reason}")
    sources = {k: ctx.get_parameter_source(k) for k in SERVING_KEYS}
    explicit = {k for k, src in sources.items() if src is not None and src.name != "DEFAULT"}
    recipe_serving = hints.engine_overrides(explicit)
    if recipe_serving:
        typer.echo(f"llmhost: serving settings from the artifact's recipe: {recipe_serving}")
    return hints, recipe_serving


def _engine_config(
    f: dict[str, Any], hints: ServeHints | None, recipe: dict[str, Any], draft_path: str
) -> EngineConfig:
    """The engine's settings: flags, else the SageMaker / TGI environment variables, else defaults."""
    from llmhost.engine import EngineConfig
    from llmhost.server.settings import env_int

    embeddings = f["embeddings"]
    return EngineConfig(
        max_concurrent=f["max_concurrent"] or env_int("MAX_CONCURRENT_REQUESTS", 8),
        max_queue=f["max_queue"],
        # embeddings: llama-server's limit (its 512-token physical batch); a decode holds a whole input
        max_input_tokens=f["max_input_tokens"] or env_int("MAX_INPUT_LENGTH", 512 if embeddings else 2048),
        max_total_tokens=f["max_total_tokens"] or env_int("MAX_TOTAL_TOKENS", 4096),
        max_batch_tokens=f["max_batch_tokens"] or env_int("MAX_BATCH_TOTAL_TOKENS", 512),
        prefix_cache_tokens=f["prefix_cache_tokens"],
        n_threads=f["threads"] or env_int("LLMHOST_THREADS", 0),
        flash_attn=f["flash_attn"],
        speculative="draft" if f["draft_model"] else recipe.get("speculative", f["speculative"]),
        draft_model=draft_path,
        draft_tokens=recipe.get("draft_tokens", f["draft_tokens"]),
        ngram_size=recipe.get("ngram_size", f["ngram_size"]),
        load_mode=hints.load_mode if hints else "auto",
        repack=hints.repack if hints else True,
        prefix_state_path=hints.prefix_state_path if hints else "",
        queue_timeout_s=f["queue_timeout_s"],
        request_timeout_s=f["request_timeout_s"],
    )


def _server_settings(f: dict[str, Any], engine: EngineConfig, resolved: ResolvedModel) -> ServerSettings:
    from llmhost.auth import load_keys
    from llmhost.engine.embedder import EmbedderConfig
    from llmhost.server import ServerSettings
    from llmhost.server.custom_code import find_script
    from llmhost.server.settings import DEFAULT_PORT, env_int

    if f["pooling"] != "auto" and not f["embeddings"]:
        raise ValueError("--pooling applies to --embeddings only")
    chat_template: Path | None = f["chat_template"]
    return ServerSettings(
        model_path=resolved.gguf,
        engine=engine,
        host=f["host"],
        port=f["port"] or env_int("SAGEMAKER_BIND_TO_PORT", DEFAULT_PORT),
        served_model_name=f["served_model_name"],
        chat_template=chat_template.read_text() if chat_template else None,
        tool_parser=f["tool_parser"],
        api_keys=load_keys(f["api_key"] or [], f["api_key_file"]),
        embeddings=EmbedderConfig.from_engine(engine, f["pooling"]) if f["embeddings"] else None,
        inference_script=find_script(resolved.model_dir),
    )


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
