"""The settings spec is the one declaration of `llmhost serve`'s settings: a setting added to a copy of it
reaches `llmhost serve`, an endpoint copy, a Ray copy and a sweep with no other edit; the docs' table of
serve options (docs/reference/cli.md, generated when the site is built) is the spec's; importing it never
loads llama.cpp."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import llmhost.serve_settings
from llmhost.bench.serve_config import serve_model
from llmhost.bench.sweep import ConfigSpec, SweepSpec, expand
from llmhost.cli import serve_command
from llmhost.endpoint.rayserve.server import copy_options
from llmhost.endpoint.replica import copy_command
from llmhost.endpoint.spec import ComponentSpec, EngineSpec, ResourcesSpec, engine_model
from llmhost.serve_settings import ServeOptions
from llmhost.serve_spec import SERVE_SPEC, Setting

CLI_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
KNOB = Setting("new_knob", int, 5, "A new knob.", ge=1, endpoint=True, metavar="N")
SPEC = SERVE_SPEC.with_setting(KNOB)


def test_importing_the_spec_and_its_readers_never_loads_llama_cpp() -> None:
    modules = ["llmhost.serve_spec", "llmhost.engine.config", "llmhost.endpoint.spec",
               "llmhost.bench.sweep", "llmhost.tune.runner", "llmhost.endpoint.rayserve.options",
               "llmhost.serve_settings"]  # fmt: skip
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

    monkeypatch.setattr(llmhost.serve_settings, "build", build)
    result = CliRunner().invoke(_app(SPEC), ["serve", "m.gguf", "--new-knob", "7", "--max-queue", "3"])
    assert isinstance(result.exception, Captured), result.output
    (opts,) = seen
    assert (opts.new_knob, opts.max_queue, opts.model) == (7, 3, "m.gguf")
    assert {"new_knob", "max_queue"} <= opts.explicit
    assert ServeOptions(spec=SPEC).new_knob == 5  # its default where not given
    with pytest.raises(TypeError, match="new_knob"):
        ServeOptions(new_knob=7)  # not a setting of the real spec


def _component(engine: dict[str, Any]) -> ComponentSpec:
    model = engine_model(SPEC)
    return ComponentSpec.model_construct(name="c", model="m.gguf", engine=model(**engine),
                                         resources=ResourcesSpec(num_cpus=2))  # fmt: skip


def test_a_new_setting_is_an_endpoint_files_engine_key_and_reaches_its_copies() -> None:
    model = engine_model(SPEC)
    with pytest.raises(ValueError, match="new_knob"):
        model(new_knob=0)  # the spec's bound
    with pytest.raises(ValueError, match="other_knob"):
        model(other_knob=1)  # unknown keys are still refused
    comp = _component({"new_knob": 7, "max_concurrent": 2})
    argv = copy_command(comp, "m.gguf", 9000, 2)
    assert argv[argv.index("--new-knob") + 1] == "7" and argv[argv.index("--max-concurrent") + 1] == "2"
    ray = copy_options(comp, None)  # a Ray copy's options, built in-process
    assert (ray.new_knob, ray.max_concurrent, ray.threads) == (7, 2, 2)
    assert ray.explicit == {"new_knob", "max_concurrent"}


def test_a_copy_is_told_the_memory_its_component_reserves() -> None:
    """So that its default prompt cache fits in that reservation (on one host and under Ray alike)."""
    comp = ComponentSpec.model_construct(name="c", model="m.gguf", engine=engine_model(SERVE_SPEC)(),
                                         resources=ResourcesSpec(num_cpus=1, memory_mb=1536))  # fmt: skip
    argv = copy_command(comp, "m.gguf", 9000, 1)
    assert argv[argv.index("--memory-mb") + 1] == "1536"
    assert copy_options(comp, None).memory_mb == 1536
    assert "memory_mb" not in engine_model(SERVE_SPEC).model_fields  # the component's resources say it


def test_a_new_setting_can_be_swept() -> None:
    serve = serve_model(SPEC)(new_knob=[1, 2], threads=1)
    spec = SweepSpec.model_construct(configurations=[ConfigSpec.model_construct(serve=serve, name=None)])
    launches = expand(spec)
    assert [launch.name for launch in launches] == ["default-t1-new_knob1", "default-t1-new_knob2"]
    argv = launches[1].argv
    assert argv[argv.index("--new-knob") + 1] == "2" and launches[1].params["new_knob"] == 2


def test_the_choices_the_spec_declares_are_those_the_engine_and_server_take() -> None:
    from llmhost.engine.config import SPECULATIVE_MODES
    from llmhost.engine.gguf_meta import POOLING

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
