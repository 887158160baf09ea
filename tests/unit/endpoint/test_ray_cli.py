"""`llmhost endpoint up`'s refusals before anything starts (no Ray started, no copy): options of the
other mode, Ray missing, unreadable chat templates, bad log levels."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llmhost.endpoint import cli
from llmhost.endpoint.cli import app

ENDPOINT = "name: e\ncomponents:\n  - {name: a, model: default}\n"


@pytest.fixture
def file(tmp_path: Path) -> Path:
    path = tmp_path / "endpoint.yaml"
    path.write_text(ENDPOINT)
    return path


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the `ray` extra were not installed."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )


def up(*args: str) -> Any:
    return CliRunner().invoke(app, ["up", *args])


@pytest.mark.parametrize("given", [("--health-misses", "5"), ("--log-dir", "/tmp/x")])
def test_single_host_options_are_refused_with_ray(file: Path, given: tuple[str, str]) -> None:
    result = up(str(file), "--ray", *given)
    assert result.exit_code == 2 and f"error: {given[0]} does not apply to a Ray endpoint" in result.output


@pytest.mark.parametrize(
    "given",
    [
        ("--ray-address", "auto"),
        ("--ray-dashboard", "http://h:8265"),
        ("--autoscale-window", "5"),
        ("--placement-timeout", "5"),
    ],
)
def test_ray_options_are_refused_without_ray(file: Path, given: tuple[str, str]) -> None:
    result = up(str(file), *given)
    assert result.exit_code == 2 and f"error: {given[0]} applies with --ray only" in result.output


def test_options_at_their_default_are_no_refusal(file: Path, no_ray: None) -> None:
    """Given at their default, the other mode's options pass: here up to Ray found missing."""
    result = up(str(file), "--ray", "--health-misses", "3")
    assert result.exit_code == 2 and "--ray needs Ray Serve: pip install 'llmhost[ray]'" in result.output


def test_ray_missing_is_said_with_the_install_command(file: Path, no_ray: None) -> None:
    result = up(str(file), "--ray")
    assert result.exit_code == 2 and "pip install 'llmhost[ray]'" in result.output


def test_a_bad_log_level_is_refused_in_both_modes(file: Path) -> None:
    for ray in ([], ["--ray"]):
        result = up(str(file), *ray, "--log-level", "loud")
        assert result.exit_code == 2
        assert "--log-level must be one of debug, info, warning, error" in result.output


def test_an_unreadable_chat_template_is_refused_before_ray_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    path = tmp_path / "endpoint.yaml"
    engine = f"{{chat_template: {tmp_path}/absent.jinja}}"
    path.write_text(f"name: e\ncomponents:\n  - {{name: a, engine: {engine}}}\n")
    monkeypatch.setattr(ray, "init", lambda *a, **kw: pytest.fail("Ray started"))
    result = up(str(path), "--ray")
    assert result.exit_code == 2, result.output
    assert f"components(a).engine.chat_template: {tmp_path}/absent.jinja: cannot read" in result.output


def test_the_refused_options_are_options_of_up() -> None:
    import inspect

    params = inspect.signature(cli.up).parameters
    assert set(cli.SINGLE_HOST_ONLY) | set(cli.RAY_ONLY) <= set(params)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (("--console-period", "0"), "console period must be in [0.05, 300] seconds, got 0.0"),
        (("--reports", "/nonexistent/results"), "reports /nonexistent/results: not a folder"),
    ],
)
def test_the_consoles_options_are_checked_with_ray_before_ray_starts(
    file: Path, given: tuple[str, str], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    monkeypatch.setattr(ray, "init", lambda *a, **kw: pytest.fail("Ray started"))
    result = up(str(file), "--ray", *given)
    assert result.exit_code == 2 and f"error: {said}" in result.output


def test_the_consoles_options_reach_the_ray_application(tmp_path: Path) -> None:
    from llmhost.console.api import ConsoleSettings
    from llmhost.endpoint.rayserve.options import push_period_s
    from llmhost.endpoint.rayserve.up import Dashboards, RayUp, app_args
    from llmhost.endpoint.spec import parse_endpoint

    spec = parse_endpoint({"name": "e", "components": [{"name": "a"}]})
    up_ = RayUp(None, console=ConsoleSettings(period_s=2.0, reports_dir=tmp_path))
    args = app_args(spec, up_, Dashboards("http://h:8265", "http://h:8265"), {})
    assert args.console_period_s == 2.0 and args.reports_dir == str(tmp_path.resolve())
    assert app_args(spec, RayUp(None), Dashboards("d", "d"), {}).reports_dir is None
    assert push_period_s(2.0) == 1.0 and push_period_s(60.0) == 5.0  # twice a period, at most every 5 s


def test_variants_are_refused_with_ray(tmp_path: Path) -> None:
    path = tmp_path / "endpoint.yaml"
    path.write_text("name: e\ncomponents:\n  - {name: a, variants: [{name: x}, {name: y}]}\n")
    result = up(str(path), "--ray")
    assert result.exit_code == 2, result.output
    assert "production and shadow variants (variants:) run on a single-host endpoint only" in result.output
