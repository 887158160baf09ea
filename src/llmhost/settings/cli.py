"""Command-line options from settings groups: each field of a group (a frozen dataclass whose fields are
`settings.setting`s) is one typer option, so commands share a group (where to listen, API keys, the log
level, the console) instead of re-declaring its options, and receive it typed (`listen.port: int`).

`grouped(listen=ListenSettings, auth=AuthOptions)` turns `def up(file: ..., listen: ListenSettings, auth:
AuthOptions)` into a typer command with the function's own parameters and every field of each group as
an option; a group whose values do not go together (its `__post_init__` raises ValueError) is a usage
error (exit 2) naming the option.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from llmhost.settings.setting import Setting, SettingsSpec

_F = TypeVar("_F", bound=Callable[..., Any])


def option(s: Setting) -> inspect.Parameter:
    """A setting as a typer option: `--name-with-dashes`, its help and default (none: required)."""
    kind: Any = s.type
    decls: list[str] = [s.flag] if s.switch else list(s.flags)
    extra: dict[str, Any] = {"show_default": False} if s.repeatable else {}
    if s.repeatable:
        kind = list[s.type] | None  # type: ignore[name-defined]
    elif s.default is None:
        kind = s.type | None
    option = typer.Option(*decls, help=s.help, **extra)
    default = inspect.Parameter.empty if s.required else s.default
    return inspect.Parameter(
        s.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option]
    )


def grouped(**groups: type[Any]) -> Callable[[_F], _F]:
    """The command `fn` with one option per field of each group, called with the groups built."""
    specs = {name: SettingsSpec.of((group,)) for name, group in groups.items()}

    def decorate(fn: _F) -> _F:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name not in groups]

        @functools.wraps(fn)
        def command(**given: Any) -> Any:
            kwargs = {p.name: given.pop(p.name) for p in own}
            for name, group in groups.items():
                try:
                    kwargs[name] = group(**{s.name: given.pop(s.name) for s in specs[name]})
                except ValueError as exc:  # as the commands report a usage error: a line, exit 2
                    typer.echo(f"error: {exc}", err=True)
                    raise typer.Exit(2) from None
            return fn(**kwargs)

        params = [*own, *(option(s) for spec in specs.values() for s in spec)]
        ordered = sorted(params, key=lambda p: p.kind)  # positional (ctx, arguments) first
        command.__signature__ = inspect.Signature(ordered)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in ordered}
        del command.__wrapped__  # typer reads the signature above, not fn's
        return command  # type: ignore[return-value]

    return decorate
