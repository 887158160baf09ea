"""`llmhost` command line."""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmhost.bench.cli import app as bench_app
from llmhost.endpoint.cli import app as endpoint_app
from llmhost.optimize.cli import app as optimize_app
from llmhost.serve_spec import SERVE_SPEC, Setting, SettingsSpec
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


MODEL_HELP = (
    "A .gguf file, a directory holding one, s3://bucket/prefix/, s3://bucket/model.tar.gz (downloaded once "
    "into ~/.cache/llmhost/models, or $LLMHOST_CACHE), or 'default'. Unset: $SM_MODEL_DIR, /opt/ml/model if "
    "present, else the bundled Gemma 3 270M."
)


def _option(s: Setting) -> inspect.Parameter:
    """A setting as a typer option: `--name-with-dashes`, its help and default."""
    kind: Any = s.type
    decls: list[str] = [s.flag] if s.switch else []
    extra: dict[str, Any] = {"show_default": False} if s.repeatable else {}
    if s.repeatable:
        kind = list[s.type] | None  # type: ignore[name-defined]
    elif s.default is None:
        kind = s.type | None
    option = typer.Option(*decls, help=s.help, **extra)
    return inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=s.default,
                             annotation=Annotated[kind, option])  # fmt: skip


def serve_command(spec: SettingsSpec) -> Callable[..., None]:
    """`llmhost serve` with one option per setting of `spec`."""

    def serve(ctx: typer.Context, **given: Any) -> None:
        """Serve a GGUF model on one replica (SageMaker / OpenAI / TGI APIs)."""
        sources = {k: ctx.get_parameter_source(k) for k in ctx.params}
        explicit = frozenset(k for k, src in sources.items() if src is not None and src.name != "DEFAULT")
        _serve(spec, given, explicit)

    params = [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        inspect.Parameter("model", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Annotated[str | None, typer.Argument(help=MODEL_HELP)]),
        *(_option(s) for s in spec),
        inspect.Parameter("s3_endpoint_url", inspect.Parameter.KEYWORD_ONLY, default="",
                          annotation=S3EndpointOpt),
    ]  # fmt: skip
    serve.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    serve.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    return serve


def _serve(spec: SettingsSpec, given: dict[str, Any], explicit: frozenset[str]) -> None:
    # imported here: they load llama.cpp, which `llmhost bench` does not need
    from llmhost.auth import load_keys
    from llmhost.serve_settings import ServeOptions, build

    process = {s.name: given.pop(s.name) for s in spec if s.process}
    log_level = str(process["log_level"])
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    use_s3_endpoint(given.pop("s3_endpoint_url"))
    model = given.pop("model")
    try:
        # a file setting's value is the file's text (the chat template)
        values = {k: v.read_text() if isinstance(v, Path) else v for k, v in given.items()}
        keys = load_keys(process["api_key"] or [], process["api_key_file"])
        built = build(ServeOptions(model, api_keys=keys, explicit=explicit, spec=spec, **values))
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
    code = run_server(settings, float(process["shutdown_grace_s"]), log_level)
    if code:
        raise typer.Exit(code)


serve = app.command(name="serve")(serve_command(SERVE_SPEC))


def run_server(settings: ServerSettings, grace_s: float, log_level: str) -> int:
    """Serve until drained after SIGTERM (0) or until the engine dies (1); returns the exit status."""
    import uvicorn

    from llmhost.lifecycle import KEEP_ALIVE_S, GracefulServer, Lifecycle
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
        timeout_keep_alive=KEEP_ALIVE_S,
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
