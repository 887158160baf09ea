"""Commands built from settings groups: each field an option (its flags, default, or required), the
function called with the groups built and typed, a group whose values do not go together a usage error;
`endpoint up`, `tune` and `serve` share the groups they have in common."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated

import typer
from typer.testing import CliRunner

from llmhost.settings.cli import grouped
from llmhost.settings.serve import SERVE_SPEC, AuthOptions, ConsoleOptions, ListenSettings, LogOptions
from llmhost.settings.setting import required, setting


@dataclass(frozen=True, kw_only=True)
class Knobs:
    size: int = required("How big.", flags=("--size", "-s"))
    names: list[str] | None = setting(None, "A name (repeatable).")
    loud: bool = setting(False, "Shout.", switch=True)

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"--size must be >= 0, got {self.size}")


def _app(seen: list[tuple[str, Knobs, LogOptions]]) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @grouped(knobs=Knobs, log=LogOptions)
    def run(where: Annotated[str, typer.Argument()], *, knobs: Knobs, log: LogOptions) -> None:
        seen.append((where, knobs, log))

    app.command(name="other")(lambda: None)
    return app


def test_each_field_is_an_option_and_the_command_gets_its_groups() -> None:
    seen: list[tuple[str, Knobs, LogOptions]] = []
    result = CliRunner().invoke(
        _app(seen),
        ["run", "here", "-s", "3", "--names", "a", "--names", "b", "--loud", "--log-level", "debug"],
    )
    assert result.exit_code == 0, result.output
    assert seen == [("here", Knobs(size=3, names=["a", "b"], loud=True), LogOptions(log_level="debug"))]


def test_a_required_option_missing_and_a_group_refusing_its_values_are_usage_errors() -> None:
    seen: list[tuple[str, Knobs, LogOptions]] = []
    missing = CliRunner().invoke(_app(seen), ["run", "here"])
    assert missing.exit_code == 2 and "--size" in missing.output
    refused = CliRunner().invoke(_app(seen), ["run", "here", "--size", "-1"])
    assert refused.exit_code == 2 and "error: --size must be >= 0, got -1" in refused.output
    level = CliRunner().invoke(_app(seen), ["run", "here", "--size", "1", "--log-level", "loud"])
    assert level.exit_code == 2 and "--log-level must be one of debug, info, warning, error" in level.output
    assert not seen


def test_up_tune_and_serve_share_the_common_groups() -> None:
    from llmhost.cli import serve
    from llmhost.endpoint.cli import up
    from llmhost.tune.cli import tune

    serve_options, up_options = inspect.signature(serve).parameters, inspect.signature(up).parameters
    for group in (ListenSettings, AuthOptions, LogOptions, ConsoleOptions):
        names = set(group.__dataclass_fields__)
        assert names <= set(serve_options) and names <= set(up_options), group
        for name in names - {"port"}:  # one declaration: the same option (the endpoint's port is 8080's)
            assert up_options[name].annotation.__metadata__[0].help == SERVE_SPEC[name].help, name
    assert {"slo_ttft_ms", "out", "max_concurrent"} <= set(inspect.signature(tune).parameters)
