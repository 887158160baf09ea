"""The settings groups' fields are the one declaration of `llmhost serve`'s settings: a setting added as
one field (`ubatch_size`, llama-server's --ubatch-size, was) reaches `llmhost serve`, an endpoint copy, a
Ray copy and a sweep with no other edit; the docs' table of serve options (docs/reference/cli.md,
generated when the site is built) is the spec's; importing it never loads llama.cpp."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import llmhost.settings.build
from llmhost.bench.serve_config import ServeSpec
from llmhost.bench.sweep import ConfigSpec, SweepSpec, expand
from llmhost.cli import serve_command
from llmhost.endpoint.control.replica import copy_command
from llmhost.endpoint.rayserve.server import copy_options
from llmhost.endpoint.spec import ComponentSpec, EngineSpec, ResourcesSpec
from llmhost.settings.build import ServeOptions
from llmhost.settings.serve import SERVE_SPEC, EngineSettings
from llmhost.settings.setting import SettingsSpec, setting

CLI_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"


def test_importing_the_spec_and_its_readers_never_loads_llama_cpp() -> None:
    modules = [
        "llmhost.settings.serve",
        "llmhost.engine.config",
        "llmhost.endpoint.spec",
        "llmhost.bench.sweep",
        "llmhost.tune.runner",
        "llmhost.endpoint.rayserve.options",
        "llmhost.settings.build",
    ]
    code = f"import sys, {', '.join(modules)}; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_docs_table_is_the_spec() -> None:
    from docsgen.hooks import expand

    text = expand(CLI_PAGE.read_text())
    table = re.search(r"<!-- serve-options:start -->\n(.*?)\n<!-- serve-options:end -->", text, re.S)
    assert table is not None
    assert table.group(1) == SERVE_SPEC.table(), "the docs' serve options differ from serve_spec.py"


def test_every_setting_is_a_serve_option_with_its_help() -> None:
    result = CliRunner().invoke(_app(SERVE_SPEC), ["serve", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for s in SERVE_SPEC:
        assert s.flag in result.output, s.name
    assert set(EngineSpec.model_fields) == {s.name for s in SERVE_SPEC if s.endpoint}


def _app(spec: Any) -> typer.Typer:
    app = typer.Typer()
    app.command(name="serve")(serve_command(spec))
    app.command(name="other")(lambda: None)  # two commands: `serve` is a subcommand as in llmhost
    return app


class Captured(Exception):
    pass


def test_a_new_setting_reaches_llmhost_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ServeOptions] = []

    def build(opts: ServeOptions, env: Any = None) -> Any:
        seen.append(opts)
        raise Captured

    monkeypatch.setattr(llmhost.settings.build, "build", build)
    args = ["serve", "m.gguf", "--ubatch-size", "7", "--max-queue", "3"]
    result = CliRunner().invoke(_app(SERVE_SPEC), args)
    assert isinstance(result.exception, Captured), result.output
    (opts,) = seen
    assert (opts.ubatch_size, opts.max_queue, opts.model) == (7, 3, "m.gguf")
    assert {"ubatch_size", "max_queue"} <= opts.explicit
    assert ServeOptions().ubatch_size == 0  # its default where not given: llama.cpp's
    with pytest.raises(TypeError, match="new_knob"):
        ServeOptions(new_knob=7)  # type: ignore[call-arg]  # not a setting


def test_a_setting_is_a_typed_field_with_its_metadata() -> None:
    @dataclass(frozen=True, kw_only=True)
    class More(EngineSettings):
        new_knob: int = setting(5, "A new knob.", ge=1, endpoint=True, metavar="N")

    knob = SettingsSpec.of((More,))["new_knob"]
    assert (knob.type, knob.default, knob.ge, knob.flag, knob.endpoint) == (int, 5, 1, "--new-knob", True)
    assert SettingsSpec.of((More,)).names()[-1] == "new_knob"  # after the fields it extends


def _component(engine: dict[str, Any]) -> ComponentSpec:
    return ComponentSpec.model_construct(
        name="c", model="m.gguf", engine=EngineSpec(**engine), resources=ResourcesSpec(num_cpus=2)
    )


def test_a_new_setting_is_an_endpoint_files_engine_key_and_reaches_its_copies() -> None:
    with pytest.raises(ValueError, match="ubatch_size"):
        EngineSpec(ubatch_size=0)  # the spec's bound
    with pytest.raises(ValueError, match="other_knob"):
        EngineSpec(other_knob=1)  # type: ignore[call-arg]  # unknown keys are still refused
    comp = _component({"ubatch_size": 7, "max_concurrent": 2})
    argv = copy_command(comp, "m.gguf", 9000, 2)
    assert argv[argv.index("--ubatch-size") + 1] == "7" and argv[argv.index("--max-concurrent") + 1] == "2"
    ray = copy_options(comp, None)  # a Ray copy's options, built in-process
    assert (ray.ubatch_size, ray.max_concurrent, ray.threads) == (7, 2, 2)
    assert ray.explicit == {"ubatch_size", "max_concurrent"}


def test_a_copy_is_told_the_memory_its_component_reserves() -> None:
    """So that its default prompt cache fits in that reservation (on one host and under Ray alike)."""
    comp = ComponentSpec.model_construct(
        name="c", model="m.gguf", engine=EngineSpec(), resources=ResourcesSpec(num_cpus=1, memory_mb=1536)
    )
    argv = copy_command(comp, "m.gguf", 9000, 1)
    assert argv[argv.index("--memory-mb") + 1] == "1536"
    assert copy_options(comp, None).memory_mb == 1536
    assert "memory_mb" not in EngineSpec.model_fields  # the component's resources say it


def test_a_new_setting_can_be_swept() -> None:
    serve = ServeSpec(ubatch_size=[32, 64], threads=1)
    spec = SweepSpec.model_construct(configurations=[ConfigSpec.model_construct(serve=serve, name=None)])
    launches = expand(spec)
    assert [launch.name for launch in launches] == ["default-t1-ub32", "default-t1-ub64"]
    argv = launches[1].argv
    assert argv[argv.index("--ubatch-size") + 1] == "64" and launches[1].params["ubatch_size"] == 64


def test_the_choices_the_spec_declares_are_those_the_engine_and_server_take() -> None:
    from llmhost.engine.config import SPECULATIVE_MODES
    from llmhost.engine.llamacpp.gguf_meta import POOLING

    assert set(SERVE_SPEC["pooling"].choices) == set(POOLING)
    assert {"", *SERVE_SPEC["speculative"].choices} == set(SPECULATIVE_MODES)


def test_the_fields_the_spec_names_exist() -> None:
    from dataclasses import fields

    from llmhost.engine.config import EngineConfig
    from llmhost.server.settings import ServerSettings

    engine, server = {f.name for f in fields(EngineConfig)}, {f.name for f in fields(ServerSettings)}
    for s in SERVE_SPEC:
        assert not s.engine or s.engine in engine, s.name
        assert not s.server or s.server in server, s.name
