"""`llmhost` command line."""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer import _click as click  # typer 0.29 vendors click: its groups take these types, not click's
from typer.core import TyperGroup

from llmhost.process import startup
from llmhost.settings.cli import option
from llmhost.settings.serve import SERVE_SPEC, ProcessSettings, SettingsSpec
from llmhost.store.options import S3EndpointOpt, use_s3_endpoint

if TYPE_CHECKING:
    from llmhost.server import ServerSettings

# each command's page of the docs site (docs/ in the repository, `make docs` builds it): the last line of
# its --help; a subcommand has its group's page. tests/docs/ checks that each page exists with this title
DOCS_PAGES: dict[tuple[str, ...], tuple[str, str]] = {
    ("llmhost",): ("getting-started.md", "Getting started"),
    ("llmhost", "serve"): ("guides/serve.md", "Serve a model"),
    ("llmhost", "bench"): ("guides/bench.md", "Benchmark and cost"),
    ("llmhost", "endpoint"): ("guides/endpoints.md", "Endpoints of many models and copies"),
    ("llmhost", "optimize"): ("guides/optimize.md", "Optimize a model"),
    ("llmhost", "tune"): ("guides/tune.md", "Tune a deployment"),
    ("llmhost", "models"): ("guides/models-by-name.md", "Models by name from the Hugging Face Hub"),
    ("serve",): ("guides/sagemaker.md", "SageMaker: the container, inference.py and the Runtime API"),
}


def docs_line(path: tuple[str, ...]) -> str:
    """The docs line of a command path, e.g. ("llmhost", "serve"): its page's title, source and built
    file (the site is built with use_directory_urls off: it opens from disk)."""
    while path not in DOCS_PAGES:
        path = path[:-1]
    page, title = DOCS_PAGES[path]
    html = page.removesuffix(".md") + ".html"
    return f'Docs: "{title}", docs/{page} (the site\'s site/{html} once `make docs` built it)'


def _link_group(group: typer.Typer, path: tuple[str, ...]) -> None:
    """Each command of a group (and of its subgroups) ends its help with the group's page."""
    for command in group.registered_commands:
        command.epilog = command.epilog or docs_line(path)
    for subgroup in group.registered_groups:
        subgroup.epilog = subgroup.epilog or docs_line(path)
        if subgroup.typer_instance is not None:
            _link_group(subgroup.typer_instance, path)


# command -> (module, attribute: a group's Typer app or a command's function)
LAZY_COMMANDS = {
    "batch": ("llmhost.offline.cli", "batch"),
    "bench": ("llmhost.bench.cli", "app"),
    "endpoint": ("llmhost.endpoint.cli", "app"),
    "optimize": ("llmhost.optimize.cli", "app"),
    "tune": ("llmhost.tune.cli", "tune"),
    "models": ("llmhost.store.cli", "app"),
}


@functools.cache  # help asks for every command, once per listing and once per line: build each once
def _load_command(name: str) -> click.Command:
    module, attr = LAZY_COMMANDS[name]
    target = getattr(importlib.import_module(module), attr)
    startup.release()
    holder = typer.Typer()
    if isinstance(target, typer.Typer):
        _link_group(target, ("llmhost", name))
        holder.add_typer(target, name=name, epilog=docs_line(("llmhost", name)))
    else:
        settings = getattr(importlib.import_module(module), "CONTEXT_SETTINGS", None)
        holder.command(name=name, epilog=docs_line(("llmhost", name)), context_settings=settings)(target)
    return typer.main.get_group(holder).commands[name]


class _LazyGroup(TyperGroup):
    """`llmhost`'s commands, each imported when it runs (or help lists it): `llmhost serve`, which every
    endpoint copy runs, does not import bench's aiohttp and numpy, the endpoint or the tuner (1.3 s of
    CPU per start, measured with `python -X importtime`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*LAZY_COMMANDS, *super().list_commands(ctx)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            return _load_command(cmd_name)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    help="Self-hosted, CPU-first LLM endpoints over llama.cpp.",
    no_args_is_help=True,
    epilog=docs_line(("llmhost",)),
    cls=_LazyGroup,
)


@app.callback()
def _main() -> None:
    """llmhost: serve GGUF models with SageMaker, OpenAI and TGI APIs."""


MODEL_HELP = (
    "A .gguf file, a directory holding one, s3://bucket/prefix/, s3://bucket/model.tar.gz (downloaded once "
    "into ~/.cache/llmhost/models, or $LLMHOST_CACHE), hf://OWNER/REPO/FILE.gguf or hf://OWNER/REPO:QUANT "
    "(the Hugging Face Hub, cached by huggingface_hub), or 'default'. Unset: $SM_MODEL_DIR, /opt/ml/model if "
    "present, else the bundled Gemma 3 270M."
)


def serve_command(spec: SettingsSpec) -> Callable[..., None]:
    """`llmhost serve` with one option per setting of `spec`."""

    def serve(ctx: typer.Context, **given: Any) -> None:
        """Serve a GGUF model on one replica (SageMaker / OpenAI / TGI APIs)."""
        sources = {k: ctx.get_parameter_source(k) for k in ctx.params}
        explicit = frozenset(k for k, src in sources.items() if src is not None and src.name != "DEFAULT")
        _serve(spec, given, explicit)

    params = [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        inspect.Parameter(
            "model",
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[str | None, typer.Argument(help=MODEL_HELP)],
        ),
        *(option(s) for s in spec),
        inspect.Parameter(
            "s3_endpoint_url", inspect.Parameter.KEYWORD_ONLY, default="", annotation=S3EndpointOpt
        ),
    ]
    serve.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    serve.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    return serve


def _serve(spec: SettingsSpec, given: dict[str, Any], explicit: frozenset[str]) -> None:
    # imported here: they load llama.cpp, which `llmhost bench` does not need
    from llmhost.settings.build import ServeOptions, build
    from llmhost.web.auth import load_keys

    try:
        process = ProcessSettings(**{s.name: given.pop(s.name) for s in spec if s.process})
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    log_level = process.log_level
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    use_s3_endpoint(given.pop("s3_endpoint_url"))
    model = given.pop("model")
    try:
        # a file setting's value is the file's text (the chat template)
        values: dict[str, Any] = {k: v.read_text() if isinstance(v, Path) else v for k, v in given.items()}
        keys = load_keys(process.api_key or [], process.api_key_file)
        built = build(ServeOptions(model, api_keys=keys, explicit=explicit, **values))
    except (ValueError, OSError) as exc:  # a model not found is an OSError (FileNotFoundError)
        raise typer.BadParameter(str(exc)) from exc
    for note in built.notes:
        typer.echo(f"llmhost: {note}")
    settings = built.settings
    engine = settings.engine
    shape = f"{engine.max_concurrent} sequences x {engine.max_total_tokens} tokens"
    if settings.embeddings is not None:
        shape = f"embeddings only, inputs up to {settings.embeddings.max_input_tokens} tokens"
    typer.echo(
        f"llmhost: serving {settings.model_path} on {settings.host}:{settings.port} "
        f"({engine.threads} threads, {shape})"
    )
    code = run_server(settings, process.shutdown_grace_s, log_level)
    if code:
        raise typer.Exit(code)


serve = app.command(name="serve", epilog=docs_line(("llmhost", "serve")))(serve_command(SERVE_SPEC))


def run_server(settings: ServerSettings, grace_s: float, log_level: str) -> int:
    """Serve until drained after SIGTERM (0) or until the engine dies (1); returns the exit status."""
    import uvicorn

    from llmhost.process.lifecycle import KEEP_ALIVE_S, GracefulServer, Lifecycle
    from llmhost.server import create_app
    from llmhost.server.custom_code import CustomCodeError
    from llmhost.web.traces import TracingUnavailableError

    try:
        lifecycle = Lifecycle(grace_s)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        asgi_app = create_app(settings, lifecycle=lifecycle)
    except (CustomCodeError, TracingUnavailableError) as exc:
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
    startup.release()
    GracefulServer(config, lifecycle).run()
    return lifecycle.exit_code


def main() -> None:
    startup.hold()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


def sagemaker_serve() -> None:
    """The `serve` executable SageMaker runs in a bring-your-own container (`docker run IMAGE serve`):
    `llmhost serve` of $SM_MODEL_DIR or /opt/ml/model on $SAGEMAKER_BIND_TO_PORT or 8080; any
    arguments are `llmhost serve`'s."""
    startup.hold()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sagemaker_app()(sys.argv[1:], prog_name="serve")


def sagemaker_app() -> typer.Typer:
    """An app of one command: its usage line reads `serve [OPTIONS] [MODEL]`, not `serve serve`."""
    single = typer.Typer(add_completion=False)
    single.command(help=serve.__doc__, epilog=docs_line(("serve",)))(serve)
    return single


if __name__ == "__main__":
    main()
