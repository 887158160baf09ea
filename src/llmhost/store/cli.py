"""`llmhost models`: the GGUF models in the Hugging Face Hub's cache, `pull` one, `rm` one.

huggingface_hub is imported inside the commands (by llmhost.store.hub)."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    help="GGUF models from the Hugging Face Hub: list the cache, pull, remove.", invoke_without_command=True
)

REF_HELP = "hf://OWNER/REPO/FILE.gguf, hf://OWNER/REPO:QUANT or hf://OWNER/REPO."


def _fail(exc: Exception) -> typer.Exit:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    return typer.Exit(2)


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


@app.callback()
def _models(ctx: typer.Context) -> None:
    """Without a subcommand: `llmhost models list`."""
    if ctx.invoked_subcommand is None:
        list_()


@app.command("list")
def list_() -> None:
    """The GGUF models in the hub's cache (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub): the
    reference that serves each, its size (every part of a split model) and snapshot."""
    from llmhost.store.hub import hub_cache_dir
    from llmhost.store.hubcache import cached_models

    models = cached_models()
    if not models:
        typer.echo(f"no GGUF model in the cache {hub_cache_dir()}")
        return
    width = max(len(m.ref) for m in models)
    for m in models:
        note = "" if m.current else "  (not main's snapshot)"
        typer.echo(f"{m.ref:<{width}}  {_size(m.size):>10}  {m.commit[:12]}{note}")
    typer.echo(f"{len(models)} model(s), {_size(sum(m.size for m in models))} in {hub_cache_dir()}")


@app.command()
def pull(ref: Annotated[str, typer.Argument(help=REF_HELP)]) -> None:
    """Download a model into the hub's cache (every part of a split model), checked; prints the file that
    `llmhost serve` loads. A cached model is not downloaded again."""
    from llmhost.store.hub import fetch
    from llmhost.store.hubref import HubModelError, parse_hub_ref

    try:
        paths = fetch(parse_hub_ref(ref))
    except HubModelError as exc:
        raise _fail(exc) from exc
    typer.echo(str(paths[0]))


@app.command()
def rm(ref: Annotated[str, typer.Argument(help=REF_HELP + " A repository alone removes all of it.")]) -> None:
    """Remove a model's files from the hub's cache (the blobs no other snapshot uses), or a whole
    repository. Works offline."""
    from llmhost.store.hubcache import remove
    from llmhost.store.hubref import HubModelError, parse_hub_ref

    try:
        removed = remove(parse_hub_ref(ref))
    except HubModelError as exc:
        raise _fail(exc) from exc
    for path in removed:
        typer.echo(f"removed {path}")
