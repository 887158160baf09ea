"""Every `llmhost` command, argument and option, from the typer app itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from docsgen.md import cell, table
from llmhost.cli import app, sagemaker_app
from llmhost.settings.serve import SERVE_SPEC

# typer (0.29) carries its own copy of click: its command and parameter classes are typer.core's
Command = Any


def root() -> TyperGroup:
    cmd = typer.main.get_command(app)
    assert isinstance(cmd, TyperGroup)
    return cmd


def commands(
    group: Command | None = None, path: tuple[str, ...] = ("llmhost",)
) -> Iterator[tuple[tuple[str, ...], Command]]:
    """(path, command) for the root, every group and every command, in the order of `--help`."""
    group = group or root()
    yield path, group
    if isinstance(group, TyperGroup):
        for name in group.list_commands(typer.Context(group)):
            sub = group.get_command(typer.Context(group), name)
            if sub is not None and not sub.hidden:
                yield from commands(sub, (*path, name))


def flags(cmd: Command) -> list[str]:
    """Every option spelling of a command (`--x`, `--no-x`, `-o`), help excluded."""
    out: list[str] = []
    for p in cmd.params:
        if isinstance(p, TyperOption) and p.name != "help":
            out += [*p.opts, *p.secondary_opts]
    return out


def _default(p: Any) -> str:
    """The option's own default (serve's spec options are in the spec's table, with theirs)."""
    d = p.default
    if d is None or d == "" or callable(d) or (isinstance(d, (list, tuple)) and not d):
        return ""
    if isinstance(p, TyperOption) and p.is_flag:
        return "on" if d else "off"
    return str(d.value if hasattr(d, "value") else d)


def _type(p: Any, ctx: typer.Context) -> str:
    if isinstance(p, TyperOption) and p.is_flag:
        return "flag"
    name = p.display_type(ctx).strip("<>")
    if getattr(p, "multiple", False):
        return f"{name.removeprefix('list[').removesuffix(']')} (repeatable)"
    return str(name)


def _param_rows(cmd: Command, skip: set[str]) -> list[list[str]]:
    rows = []
    ctx = typer.Context(cmd)
    for p in cmd.params:
        if p.name in skip or p.name == "help":
            continue
        if isinstance(p, TyperArgument):
            name = f"`{(p.metavar or p.name or '').upper()}` (argument)"
            required = "yes" if p.required else ""
        else:
            assert isinstance(p, TyperOption)
            name = " ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
            required = "yes" if p.required else ""
        rows.append([name, _type(p, ctx), required, _default(p), getattr(p, "help", "") or ""])
    return rows


def _help(cmd: Command) -> str:
    text = (cmd.help or "").strip()
    return "\n".join(line.strip() for line in text.splitlines()).split("\n\n")[0]


def render() -> str:
    """The CLI reference: one section per command, the serve options as the settings spec declares
    them (with what an endpoint file's `engine:` may set)."""
    out: list[str] = []
    for path, cmd in commands():
        name = " ".join(path)
        out += [f"## `{name}`", "", cell(_help(cmd)), ""]
        ctx = typer.Context(cmd, info_name=name)
        out += ["```text", " ".join(cmd.collect_usage_pieces(ctx)).join([f"{name} ", ""]), "```", ""]
        if isinstance(cmd, TyperGroup):
            subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
            rows = [
                [f"[`{name} {n}`](#{anchor(f'{name} {n}')})", cell(_help(c) if c else "")]
                for n, c in subs
                if c is not None
            ]
            out += [table(["command", "what"], rows), ""]
        skip: set[str] = set()
        if path == ("llmhost", "serve"):
            out += [
                "Options declared in `src/llmhost/settings/serve.py` (the settings spec); "
                '"endpoint `engine:`" marks those an endpoint file\'s `engine:` section may set:',
                "",
                "<!-- serve-options:start -->",
                SERVE_SPEC.table(),
                "<!-- serve-options:end -->",
                "",
                "Its other arguments and options:",
                "",
            ]
            skip = {s.name for s in SERVE_SPEC}
        rows = _param_rows(cmd, skip)
        if rows:
            out += [table(["argument / option", "type", "required", "default", "meaning"], rows), ""]
        if cmd.epilog:
            out += [cell(cmd.epilog), ""]
    single = typer.main.get_command(sagemaker_app())
    out += [
        "## `serve` (the container's executable)",
        "",
        cell(_help(single)),
        "",
        "Its arguments and options are `llmhost serve`'s.",
        "",
    ]
    return "\n".join(out)


def anchor(title: str) -> str:
    """The id Python-Markdown's toc gives a heading `## \\`title\\``."""
    import re

    slug = re.sub(r"[^\w\s-]", "", title.lower()).strip()
    return re.sub(r"[\s-]+", "-", slug)
