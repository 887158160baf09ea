"""A setting: one field of a settings group (a frozen dataclass) that carries, in its metadata, what a
command line, an environment variable, an endpoint file and the docs make of it (`setting(...)`), and the
spec of a command's settings read from those fields (`SettingsSpec.of(groups)`). The settings
themselves are declared in `llmhost.settings.serve` (`llmhost serve`'s) and beside the commands that take
other groups (`endpoint up`, `tune`)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, Self, TypeVar

_T = TypeVar("_T")


@dataclass(frozen=True)
class Setting:
    """One serving setting, as its field declares it. With `env`, a 0 or "" value is unset: the variable
    is read, else `fallback`."""

    name: str  # the option is --name-with-dashes, the endpoint file's key the name itself
    type: type[Any]  # int, float, bool, str or Path (a file whose text is the value)
    default: Any  # what `llmhost serve` shows and takes when the option is not given
    help: str
    env: str = ""  # read when the option is left unset
    fallback: Any = None  # the value with neither option nor variable; None: `default`
    ge: float | None = None  # the least value an endpoint file may set
    choices: tuple[str, ...] = ()  # the values an endpoint file may set (`llmhost serve` checks later)
    endpoint: bool = False  # an endpoint file's `engine:` may set it
    engine: str = ""  # the EngineConfig field it sets
    server: str = ""  # the ServerSettings field it sets
    label: str = ""  # its short name in a sweep's configuration names (`t2-mc4`)
    switch: bool = False  # a flag given alone (`--embeddings`), not `--x/--no-x`
    repeatable: bool = False  # a list: the option given once per value
    # a setting of the serving process itself (keys, logs, shutdown), not of the server it builds
    process: bool = False
    metavar: str = ""  # its value in the docs' table
    flags: tuple[str, ...] = ()  # the option's names where not --name-with-dashes alone (`--out`, `-o`)
    required: bool = False  # no default: the option must be given

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def given(self, value: Any, env: Mapping[str, str]) -> bool:
        """Whether the option (`value`) or its variable sets it; False where a fallback would."""
        if not self.env:
            return True
        return bool(value) or bool(env.get(self.env))

    def resolve(self, value: Any, env: Mapping[str, str], fallback: Any = None) -> Any:
        """The value in effect: the option, else the variable, else the fallback."""
        if not self.env or value:
            return value
        fb = fallback if fallback is not None else self.default if self.fallback is None else self.fallback
        if not self.given(value, env):
            return fb
        raw = env[self.env]
        try:
            return self.type(raw)
        except ValueError as exc:
            kind = "an integer" if self.type is int else f"a {self.type.__name__}"
            raise ValueError(f"environment variable {self.env}={raw!r} is not {kind}") from exc

    def argv(self, value: Any) -> list[str]:
        """The command-line arguments giving it `value`."""
        if self.repeatable:
            return [a for v in value for a in (self.flag, str(v))]
        if self.type is bool:
            if self.switch:
                return [self.flag] if value else []
            return [self.flag if value else f"--no-{self.flag[2:]}"]
        return [self.flag, str(value)]

    @property
    def shown_default(self) -> str:
        """Its default as the docs' table shows it."""
        if self.env:
            fb = self.default if self.fallback is None else self.fallback
            return f"{fb} (`{self.env}`)" if fb not in ("", None) else f"`{self.env}`"
        if self.type is bool:
            return "on" if self.default else "off"
        return "" if self.default in ("", None) else str(self.default)


def setting(
    default: _T,
    help: str,
    *,
    env: str = "",
    fallback: Any = None,
    ge: float | None = None,
    choices: tuple[str, ...] = (),
    endpoint: bool = False,
    engine: str = "",
    server: str = "",
    label: str = "",
    switch: bool = False,
    metavar: str = "",
    flags: tuple[str, ...] = (),
) -> _T:
    """A group's field that is a setting: its default, and the rest of what `Setting` says (its name,
    type, choices and whether it repeats come from the field's name and annotation)."""
    meta = dict(
        help=help,
        env=env,
        fallback=fallback,
        ge=ge,
        choices=choices,
        endpoint=endpoint,
        engine=engine,
        server=server,
        label=label,
        switch=switch,
        metavar=metavar,
        flags=flags,
    )
    return field(default=default, metadata={"setting": meta})


def required(help: str, *, flags: tuple[str, ...] = ()) -> Any:
    """A group's field that is a setting with no default: its option must be given."""
    return field(metadata={"setting": dict(help=help, flags=flags, choices=())})


def type_of(hint: Any) -> tuple[type[Any], tuple[str, ...], bool]:
    """A field's annotation as a setting's (type, choices, repeatable): `None` left out of a union, a
    Literal a str with those choices, a list a repeatable option of its items."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    repeatable = typing.get_origin(hint) is list
    if repeatable:
        (hint,) = typing.get_args(hint)
    if typing.get_origin(hint) is Literal:
        return str, tuple(typing.get_args(hint)), repeatable
    return hint, (), repeatable


def _settings_of(group: type[Any], process: bool) -> list[Setting]:
    hints = typing.get_type_hints(group)
    out = []
    for f in fields(group):
        if "setting" not in f.metadata:
            continue
        kind, choices, repeatable = type_of(hints[f.name])
        meta = {**f.metadata["setting"], "choices": f.metadata["setting"]["choices"] or choices}
        missing = f.default is MISSING
        out.append(
            Setting(
                f.name,
                kind,
                None if missing else f.default,
                repeatable=repeatable,
                process=process,
                required=missing,
                **meta,
            )
        )
    return out


@dataclass(frozen=True)
class SettingsSpec:
    settings: tuple[Setting, ...]

    @classmethod
    def of(cls, groups: tuple[type[Any], ...], process: tuple[type[Any], ...] = ()) -> Self:
        """The settings the groups' fields declare, in their order; `process`: the serving process's own."""
        return cls(tuple(s for g in (*groups, *process) for s in _settings_of(g, g in process)))

    def __post_init__(self) -> None:
        names = [s.name for s in self.settings]
        if len(set(names)) != len(names):
            raise ValueError(f"a setting is declared twice: {names}")

    def __iter__(self) -> Iterator[Setting]:
        return iter(self.settings)

    def __getitem__(self, name: str) -> Setting:
        for s in self.settings:
            if s.name == name:
                return s
        raise KeyError(name)

    def setting_of(self, engine_field: str) -> Setting:
        """The setting that sets EngineConfig's `engine_field` (its flag names a limit in a refusal)."""
        for s in self.settings:
            if s.engine == engine_field:
                return s
        raise KeyError(engine_field)

    def names(self) -> list[str]:
        return [s.name for s in self.settings]

    def built(self) -> list[Setting]:
        """The settings of the server `llmhost serve` builds (all but the process's own)."""
        return [s for s in self.settings if not s.process]

    def endpoint_settings(self) -> list[Setting]:
        return [s for s in self.settings if s.endpoint]

    def argv(self, values: Mapping[str, Any]) -> list[str]:
        """The `llmhost serve` arguments giving these settings (None: left out), in the spec's order."""
        unknown = set(values) - set(self.names())
        if unknown:
            raise ValueError(f"not a serve setting: {', '.join(sorted(unknown))}")
        return [a for s in self.settings if values.get(s.name) is not None for a in s.argv(values[s.name])]

    def table(self) -> str:
        """The docs' table of serve options (docs/reference/cli.md)."""
        rows = ["| option | default | endpoint `engine:` | meaning |", "|---|---|---|---|"]
        for s in self.settings:
            option = f"{s.flag}/--no-{s.flag[2:]}" if s.type is bool and not s.switch else s.flag
            value = f" {s.metavar}" if s.metavar else ""
            endpoint = "yes" if s.endpoint else ""
            cells = (f"`{option}{value}`", s.shown_default, endpoint, s.help)
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(rows)
