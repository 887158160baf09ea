"""A Ray copy's server settings and its in-process server (no Ray, no model loaded): every engine setting
of the endpoint file reaches the copy, built by the same function as `llmhost serve`'s."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.responses import Response
from typer.testing import CliRunner

import llmhost.cli
from llmhost.endpoint.control.replica import copy_command
from llmhost.endpoint.rayserve import nodes, server, up
from llmhost.endpoint.rayserve.options import RayTiming, component_options
from llmhost.endpoint.rayserve.server import InProcessServer
from llmhost.endpoint.spec import ComponentSpec, EngineSpec, parse_endpoint
from llmhost.optimize.artifact import write_serving_settings
from llmhost.process.lifecycle import Lifecycle
from llmhost.server import ServerSettings
from llmhost.settings.build import ServeOptions
from llmhost.settings.serve import DEFAULT_PORT, LIMIT_ENV
from llmhost.store.artifact import ARTIFACT_JSON, MODEL_GGUF, RECIPE_YAML


@pytest.fixture(autouse=True)
def no_serve_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*LIMIT_ENV, "LLMHOST_THREADS", "SAGEMAKER_BIND_TO_PORT", "LLMHOST_API_KEYS", "SM_MODEL_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {
        "model": tmp_path / "m.gguf",
        "draft": tmp_path / "d.gguf",
        "mmproj": tmp_path / "p.gguf",
        "template": tmp_path / "t.jinja",
        "media": tmp_path / "media",
    }
    out["media"].mkdir()
    out["model"].write_bytes(b"GGUF")
    out["draft"].write_bytes(b"GGUF")
    out["mmproj"].write_bytes(b"GGUF")
    out["template"].write_text("{{ messages }}")
    out["folder"] = tmp_path / "vision"  # a model with the projector found beside it
    out["folder"].mkdir()
    (out["folder"] / "m.gguf").write_bytes(b"GGUF")
    (out["folder"] / "mmproj-m.gguf").write_bytes(b"GGUF")
    return out


def ray_copy(component: dict[str, Any]) -> ServerSettings:
    """What a Ray copy of `component` starts with: the file as `up` sends it, the copy's own build."""
    spec = nodes.absolute_models(parse_endpoint({"name": "e", "components": [component]}))
    templates = nodes.chat_templates(spec)
    (comp,) = spec.components
    return server.settings_here(comp, templates.get(comp.name), {}).settings


def expectations(files: dict[str, Path]) -> dict[str, tuple[Any, Callable[[ServerSettings], Any], Any]]:
    """Per EngineSpec field: a value for the file, where the copy's settings show it, what they show."""
    return {
        "max_input_tokens": (100, lambda s: s.engine.max_input_tokens, 100),
        "max_total_tokens": (8192, lambda s: s.engine.max_total_tokens, 8192),
        "max_batch_tokens": (64, lambda s: s.engine.max_batch_tokens, 64),
        "ubatch_size": (32, lambda s: s.engine.ubatch_size, 32),
        "max_concurrent": (3, lambda s: s.engine.max_concurrent, 3),
        "max_queue": (5, lambda s: s.engine.max_queue, 5),
        "interactive_slots": (2, lambda s: s.engine.interactive_slots, 2),
        "queue_timeout_s": (2.5, lambda s: s.engine.queue_timeout_s, 2.5),
        "request_timeout_s": (9.0, lambda s: s.engine.request_timeout_s, 9.0),
        "chat_template": (str(files["template"]), lambda s: s.chat_template, "{{ messages }}"),
        "tool_parser": ("hermes", lambda s: s.tool_parser, "hermes"),
        "tool_format": ("none", lambda s: s.tool_format, "none"),
        "reasoning_format": ("none", lambda s: s.reasoning_format, "none"),
        "reasoning_budget": (16, lambda s: s.reasoning_budget, 16),
        "reasoning_budget_max": (32, lambda s: s.reasoning_budget_max, 32),
        "chat_template_kwargs": (
            '{"enable_thinking": false}',
            lambda s: s.chat_template_kwargs,
            '{"enable_thinking": false}',
        ),
        "pooling": ("cls", lambda s: s.embeddings and s.embeddings.pooling, "cls"),
        "speculative": ("ngram", lambda s: s.engine.speculative, "ngram"),
        "draft_tokens": (5, lambda s: s.engine.draft_tokens, 5),
        "draft_model": (
            str(files["draft"]),
            lambda s: (s.engine.speculative, s.engine.draft_model),
            ("draft", str(files["draft"])),
        ),
        "ngram_size": (4, lambda s: s.engine.ngram_size, 4),
        "prompt_cache_mb": (256, lambda s: s.engine.prompt_cache_mb, 256),
        "prefix_cache_seqs": (2, lambda s: s.engine.prefix_cache_seqs, 2),
        "prefix_caching": (False, lambda s: s.engine.prefix_caching, False),
        "adaptive_draft": (False, lambda s: s.engine.adaptive_draft, False),
        "cache_type_k": ("q8_0", lambda s: s.engine.cache_type_k, "q8_0"),
        "cache_type_v": ("q4_0", lambda s: s.engine.cache_type_v, "q4_0"),
        "swa_full": (True, lambda s: s.engine.swa_full, True),
        "swa_checkpoints": (1, lambda s: s.engine.swa_checkpoints, 1),
        "schedule_policy": ("cached-first", lambda s: s.engine.schedule_policy, "cached-first"),
        "mmproj": (str(files["mmproj"]), lambda s: s.engine.mmproj, str(files["mmproj"])),
        "no_mmproj": (True, lambda s: s.engine.mmproj, ""),  # none found with the folder's model
        "max_media_bytes": (1024, lambda s: s.max_media_bytes, 1024),
        "max_image_pixels": (4096, lambda s: s.max_image_pixels, 4096),
        "max_audio_seconds": (5.0, lambda s: s.max_audio_seconds, 5.0),
        "allowed_media_domains": ("a.example", lambda s: s.allowed_media_domains, "a.example"),
        "media_path": (str(files["media"]), lambda s: s.media_path, str(files["media"])),
        "capture_dir": ("s3://b/cap/", lambda s: s.capture_dir, "s3://b/cap/"),
        "capture_percent": (20, lambda s: s.capture_percent, 20),
        "capture_mode": ("input", lambda s: s.capture_mode, "input"),
        "capture_variant": ("blue", lambda s: s.capture_variant, "blue"),
        "capture_interval_s": (5.0, lambda s: s.capture_interval_s, 5.0),
    }


# the keys that mean nothing alone (the file refuses them so): given with them in both cases
WITH = {
    name: {"capture_dir": "cap"}
    for name in ("capture_percent", "capture_mode", "capture_variant", "capture_interval_s")
}


def test_every_engine_setting_of_the_file_reaches_a_ray_copy(files: dict[str, Path]) -> None:
    cases = expectations(files)
    assert set(cases) == set(EngineSpec.model_fields)  # a new field needs its case here
    for name, (value, shown, expected) in cases.items():
        model = files["folder" if name == "no_mmproj" else "model"]
        base: dict[str, Any] = {"name": "c", "model": str(model), "embeddings": name == "pooling"}
        before = ray_copy({**base, "engine": WITH.get(name, {})})
        after = ray_copy({**base, "engine": {**WITH.get(name, {}), name: value}})
        assert after != before, name
        assert shown(after) == expected, name


def copy_through_serve(monkeypatch: pytest.MonkeyPatch, spec: ComponentSpec) -> ServerSettings:
    """What `llmhost serve` builds from the arguments a single-host endpoint gives a copy."""
    seen: dict[str, ServerSettings] = {}

    def fake_run_server(settings: ServerSettings, grace_s: float, log_level: str) -> int:
        seen["settings"] = settings
        return 0

    monkeypatch.setattr(llmhost.cli, "run_server", fake_run_server)
    # the copy's command line (python -m llmhost.cli serve ...) on the port a Ray copy's settings show
    args = copy_command(spec, spec.model, DEFAULT_PORT, spec.resources.threads)[3:]
    result = CliRunner().invoke(llmhost.cli.app, args)
    assert result.exit_code == 0, result.output
    return seen["settings"]


def test_a_ray_copy_gets_what_llmhost_serve_builds_from_the_same_file(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {name: value for name, (value, _, _) in expectations(files).items()}
    # speculation keeps the sliding-window cache whole whatever swa_full says: that case apart
    ngram = {k: v for k, v in values.items() if k not in ("draft_model", "pooling", "swa_full", "no_mmproj")}
    for engine, embeddings in (
        (ngram, False),
        ({"draft_model": values["draft_model"]}, False),
        ({"pooling": "mean"}, True),
        ({"swa_full": True}, False),
        ({"no_mmproj": True}, False),
        ({}, False),
    ):
        component = {
            "name": "c",
            "model": str(files["model"]),
            "engine": engine,
            "embeddings": embeddings,
            "resources": {"num_cpus": 2},
        }
        spec = parse_endpoint({"name": "e", "components": [component]}).components[0]
        assert ray_copy(component) == copy_through_serve(monkeypatch, spec), engine


def test_serve_and_the_shared_options_default_alike() -> None:
    flags = inspect.signature(llmhost.cli.serve).parameters
    defaults = ServeOptions()
    shared = [f for f in defaults.values if f in flags]
    assert len(shared) > 15
    for name in shared:
        assert flags[name].default == getattr(defaults, name), name


def test_an_artifact_directory_gives_a_ray_copy_its_recipe_unless_the_file_says(tmp_path: Path) -> None:
    d = tmp_path / "art"
    d.mkdir()
    (d / MODEL_GGUF).write_bytes(b"GGUF")
    (d / RECIPE_YAML).write_text("source: x\nsteps: []\nrecipe: {quantize: null}\n")
    (d / ARTIFACT_JSON).write_text(json.dumps({"key": "k", "load": {"best": "read"}, "prefix_state": None}))
    write_serving_settings(d, {"speculative": "ngram", "draft_tokens": 5, "ngram_size": 4})
    engine = ray_copy({"name": "c", "model": str(d)}).engine
    assert (engine.speculative, engine.draft_tokens, engine.ngram_size) == ("ngram", 5, 4)
    assert engine.load_mode == "read"  # the artifact's measured load mode
    engine = ray_copy({"name": "c", "model": str(d), "engine": {"draft_tokens": 7}}).engine
    assert (engine.speculative, engine.draft_tokens) == ("ngram", 7)


def test_the_ingress_admits_what_the_copys_engine_does(files: dict[str, Path]) -> None:
    """max_ongoing_requests and the copy's engine read the same variables (those where `up` ran)."""
    env = {"MAX_CONCURRENT_REQUESTS": "3"}
    for engine in ({}, {"max_concurrent": 5, "max_queue": 2}):
        spec = ComponentSpec.model_validate({"name": "c", "model": str(files["model"]), "engine": engine})
        built = server.settings_here(spec, None, env).settings.engine
        ongoing = component_options(spec, RayTiming(), env, "info")["max_ongoing_requests"]
        assert ongoing == built.max_concurrent + built.max_queue
    assert built.max_concurrent == 5 and ongoing == 7


def test_a_model_missing_on_the_node_names_the_node(
    monkeypatch: pytest.MonkeyPatch, files: dict[str, Path], tmp_path: Path
) -> None:
    monkeypatch.setattr(server, "node_name", lambda: "n1 (10.0.0.9)")
    missing = {
        "absent.gguf": {"name": "c", "model": str(tmp_path / "absent.gguf")},
        "no-draft.gguf": {
            "name": "c",
            "model": str(files["model"]),
            "engine": {"draft_model": str(tmp_path / "no-draft.gguf")},
        },
    }
    for file, component in missing.items():
        with pytest.raises(FileNotFoundError, match=rf"component 'c' on node n1 \(10.0.0.9\): .*{file}"):
            server.settings_here(ComponentSpec.model_validate(component), None, {})


class FakeServerApp:
    """An app like llmhost's server: a lifespan, /ping as its lifecycle and `ready` say."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.ready = False
        self.lifecycle = Lifecycle()

        @asynccontextmanager
        async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
            self.events.append("startup")
            yield
            self.events.append("shutdown")

        self.app = FastAPI(lifespan=lifespan)

        @self.app.get("/ping")
        async def ping() -> Response:
            ok = self.ready and self.lifecycle.accepting
            return Response(status_code=200 if ok else 503, content="" if ok else "not ready")

    def server(self) -> InProcessServer:
        return InProcessServer(self.app, self.lifecycle, "c-1")


async def test_a_copy_whose_model_failed_to_load_stops_its_engine_and_says_why() -> None:
    fake = FakeServerApp()
    fake.lifecycle.exit(1, "model failed to load: bad magic")
    with pytest.raises(RuntimeError, match="copy c-1 failed to start: model failed to load: bad magic"):
        await fake.server().start(timeout_s=5)
    assert fake.events == ["startup", "shutdown"]  # the engine it started is not left running


async def test_a_copy_not_ready_within_its_startup_timeout_stops_its_engine() -> None:
    fake = FakeServerApp()
    with pytest.raises(TimeoutError, match=r"did not pass /ping within startup_health_check_timeout_s=0\.3"):
        await asyncio.wait_for(fake.server().start(timeout_s=0.3), 10)
    assert fake.events == ["startup", "shutdown"]


async def test_the_health_check_fails_once_the_engine_died() -> None:
    fake = FakeServerApp()
    fake.ready = True
    copy = fake.server()
    await copy.start(timeout_s=5)
    await copy.check()
    fake.lifecycle.exit(1, "engine died: step failed 3 times")
    with pytest.raises(RuntimeError, match=r"copy c-1: /ping answered 503 not ready; engine died"):
        await copy.check()
    await copy.stop()
    assert fake.events == ["startup", "shutdown"]


def test_a_ray_copy_traces_where_up_was_told_to(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OTEL_* variables where `up` ran (its --otlp-traces-endpoint among them) reach the app's args,
    and from them the copy's settings."""
    url = "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "mine")
    dashboards = up.Dashboards("http://127.0.0.1:8265", "http://127.0.0.1:8265")
    spec = parse_endpoint({"name": "e", "components": [{"name": "c", "model": str(files["model"])}]})
    env = up.app_args(spec, up.RayUp(address=None), dashboards, {}).env
    assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == url and env["OTEL_SERVICE_NAME"] == "mine"
    assert server.settings_here(spec.components[0], None, env).settings.otlp_traces_endpoint == url
