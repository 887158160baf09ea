"""On-demand models without processes: the folder scan, keep_alive parsing and policy, and the pool's
choice of what to unload (copies built, never started)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from llmhost.endpoint.admin import LocalAdmin, create_admin
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.manager import EndpointManager
from llmhost.endpoint.control.modelsdir import PROCESS_OVERHEAD_MB, scan
from llmhost.endpoint.control.ondemand import ModelPool
from llmhost.endpoint.control.placement import Ledger, place
from llmhost.endpoint.control.replica import Replica, ReplicaState
from llmhost.endpoint.dataplane import keepalive
from llmhost.endpoint.spec import (
    ComponentSpec,
    ModelsDirSpec,
    OnDemandPolicy,
    SpecError,
    parse_endpoint,
)
from llmhost.engine.projector_memory import projector_memory
from llmhost.store import ResolvedModel
from tests.tinymmproj import build_gemma3_mmproj


def folder(tmp_path: Path, *names: str, defaults: dict[str, Any] | None = None) -> ModelsDirSpec:
    for name in names:
        path = tmp_path / name
        if name.endswith("/"):
            path.mkdir()
            (path / "weights.gguf").write_bytes(b"GGUF" + b"\0" * 100)
        else:
            path.write_bytes(b"GGUF" + b"\0" * 2**20)
    return ModelsDirSpec(path=str(tmp_path), defaults=defaults or {})


def test_scan_finds_files_and_directories_with_their_settings(tmp_path: Path) -> None:
    spec = folder(tmp_path, "a.gguf", "b/", "notes.txt", defaults={"resources": {"num_cpus": 0.5}})
    (tmp_path / "empty").mkdir()  # no GGUF: not a model
    (tmp_path / "a.yaml").write_text(
        "on_demand: {pinned: true, keep_alive: 10}\nresources: {memory_mb: 900}\n"
    )
    a, b = scan(spec)
    assert (a.name, b.name) == ("a", "b")
    assert a.on_demand is not None and a.on_demand.pinned and a.on_demand.keep_alive == 10
    assert a.resources.num_cpus == 0.5 and a.resources.memory_mb == 900  # defaults, then its own file
    assert b.on_demand is not None and b.on_demand.keep_alive == 300 and not b.on_demand.pinned
    assert b.resources.memory_mb == 1 + PROCESS_OVERHEAD_MB  # estimated from the GGUF's size
    assert b.model == str(tmp_path / "b") and a.initial_copies == 0


def test_scan_refusals_name_the_file(tmp_path: Path) -> None:
    spec = folder(tmp_path, "a.gguf", "a/")
    with pytest.raises(SpecError, match=r"name clash: a and a.gguf both give the model name 'a'"):
        scan(spec)
    other = tmp_path / "other"
    other.mkdir()
    spec = folder(other, "x.gguf")
    with pytest.raises(SpecError, match="which a declared component has"):
        scan(spec, {"x"})
    (other / "x.yaml").write_text("copies: 2\n")
    with pytest.raises(SpecError, match=r"x.yaml: copies: not a setting of a folder's model"):
        scan(spec)
    (other / "x.yaml").write_text("on_demand: {keep_alive: -0.5}\n")
    with pytest.raises(SpecError, match=r"model 'x' .*keep_alive must be -1"):
        scan(spec)
    with pytest.raises(SpecError, match="not a directory"):
        scan(ModelsDirSpec(path=str(tmp_path / "missing")))


def test_scan_takes_a_split_model_once_and_no_mmproj(tmp_path: Path) -> None:
    spec = folder(tmp_path, *(f"big-0000{i}-of-00003.gguf" for i in (1, 2, 3)), "mmproj-big-f16.gguf")
    (tmp_path / "big.yaml").write_text("on_demand: {pinned: true}\n")
    (big,) = scan(spec)
    assert big.name == "big" and big.model == str(tmp_path / "big-00001-of-00003.gguf")
    assert big.on_demand is not None and big.on_demand.pinned  # its NAME.yaml is big.yaml
    assert big.resources.memory_mb == 4 + PROCESS_OVERHEAD_MB  # every part counts: 3 x (1 MiB + 4 bytes)


def test_scan_refuses_a_model_folder_holding_two_models(tmp_path: Path) -> None:
    spec = folder(tmp_path, "two/")
    (tmp_path / "two" / "other.gguf").write_bytes(b"GGUF")
    (tmp_path / "two" / "mmproj-x.gguf").write_bytes(b"GGUF")
    with pytest.raises(SpecError, match=r"two holds 2 models \(other.gguf, weights.gguf\)"):
        scan(spec)


def test_scan_takes_a_model_named_by_its_yaml_alone(tmp_path: Path) -> None:
    spec = folder(tmp_path, "a.gguf")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-weights"
    elsewhere.mkdir()
    folder(elsewhere, "w.gguf")
    (tmp_path / "byref.yaml").write_text(f"model: ../{elsewhere.name}/w.gguf\non_demand: {{pinned: true}}\n")
    (tmp_path / "plain.yaml").write_text("resources: {memory_mb: 10}\n")  # no model, no file: nothing
    a, byref = scan(spec)
    assert (a.name, byref.name) == ("a", "byref")
    assert byref.model == str(tmp_path / ".." / elsewhere.name / "w.gguf")
    assert byref.resources.memory_mb == 2 + PROCESS_OVERHEAD_MB and byref.on_demand and byref.on_demand.pinned
    (tmp_path / "a.yaml").write_text("model: default\n")  # beside a.gguf, the file names the model
    with pytest.raises(SpecError, match=r"a.yaml: model: not a setting of a folder's model"):
        scan(spec)
    (tmp_path / "a.yaml").unlink()
    (tmp_path / "byref.yaml").write_text("model: ./missing.gguf\n")
    with pytest.raises(SpecError, match=r"byref.yaml: model: model reference .*missing.gguf"):
        scan(spec)


def test_endpoint_file_with_models_dir() -> None:
    spec = parse_endpoint({"name": "ep", "models_dir": {"path": "/m"}, "on_demand": {"max_loaded": 2}})
    assert spec.components == [] and spec.on_demand.max_loaded == 2
    with pytest.raises(SpecError, match="at least 1 item"):
        parse_endpoint({"name": "ep"})
    with pytest.raises(SpecError, match=r"defaults: resources.gpus: unknown key"):
        parse_endpoint({"name": "ep", "models_dir": {"path": "/m", "defaults": {"resources": {"gpus": 1}}}})
    with pytest.raises(SpecError, match="copies and autoscaling do not apply"):
        parse_endpoint({"name": "ep", "components": [{"name": "a", "copies": 1, "on_demand": {}}]})
    with pytest.raises(SpecError, match="client_keep_alive"):
        parse_endpoint({"name": "ep", "models_dir": {"path": "/m"}, "on_demand": {"client_keep_alive": "x"}})


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (30, 30.0),
        (0, 0.0),
        (-1, -1.0),
        ("-5m", -1.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("45", 45.0),
        ("500ms", 0.5),
        (2.5, 2.5),
    ],
)
def test_keep_alive_forms(value: Any, seconds: float) -> None:
    assert keepalive.parse(value) == seconds


def test_keep_alive_policy() -> None:
    body = b'{"model": "a", "prompt": "x", "keep_alive": "10s"}'
    stripped, asked = keepalive.check(body, "shorten", 300, "a")
    assert asked == 10 and b"keep_alive" not in stripped and b'"prompt": "x"' in stripped
    assert keepalive.check(b'{"model": "a"}', "none", 300, "a") == (b'{"model": "a"}', None)
    with pytest.raises(keepalive.KeepAliveError, match=r"client_keep_alive: none"):
        keepalive.check(body, "none", 300, "a")
    with pytest.raises(keepalive.KeepAliveError, match=r"keep_alive: 600 s is longer than model 'a'"):
        keepalive.check(b'{"keep_alive": 600}', "shorten", 300, "a")
    with pytest.raises(keepalive.KeepAliveError, match="never unload is longer"):
        keepalive.check(b'{"keep_alive": -1}', "shorten", 300, "a")
    assert keepalive.check(b'{"keep_alive": -1}', "any", 300, "a")[1] == -1
    assert keepalive.check(b'{"keep_alive": 900}', "shorten", -1, "a")[1] == 900  # never: any is shorter
    with pytest.raises(keepalive.KeepAliveError, match=r"keep_alive: expected seconds .* got 'soon'"):
        keepalive.check(b'{"keep_alive": "soon"}', "any", 300, "a")
    with pytest.raises(keepalive.KeepAliveError, match="got True"):
        keepalive.check(b'{"keep_alive": true}', "any", 300, "a")


class Host:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.components: dict[str, Component] = {}

    def start_copy(self, comp: Component) -> asyncio.Future[bool]:
        raise AssertionError("not started in this test")

    async def stop_copy(self, comp: Component, replica: Replica) -> None:
        raise AssertionError("not stopped in this test")

    def spawn(self, coro: Any) -> asyncio.Task[None]:
        raise AssertionError("not spawned in this test")


def model(
    host: Host, tmp_path: Path, name: str, loaded_at: float | None, memory_mb: int = 500, pinned: bool = False
) -> Component:
    spec = ComponentSpec(
        name=name,
        resources={"num_cpus": 0.5, "memory_mb": memory_mb},
        on_demand={"pinned": pinned},  # type: ignore[arg-type]
    )
    comp = Component(spec, ResolvedModel(tmp_path / f"{name}.gguf"))
    if loaded_at is not None:
        r = Replica(spec, 0, comp.model, place(host.ledger, name, spec.resources), tmp_path)
        r.state = ReplicaState.READY
        comp.replicas.append(r)
        assert comp.demand is not None
        comp.demand.last_used = loaded_at
    host.components[name] = comp
    return comp


async def test_pool_unloads_least_recently_used_idle_unpinned(tmp_path: Path) -> None:
    host = Host(Ledger(cpus=[0, 1], memory_mb=4000))
    pool = ModelPool(host, OnDemandPolicy(max_loaded=2))
    a = model(host, tmp_path, "a", loaded_at=1.0)
    b = model(host, tmp_path, "b", loaded_at=2.0)
    c = model(host, tmp_path, "c", loaded_at=None)
    assert pool.plan(c) == ([a], None)
    a.in_flight = 1  # busy: not taken
    assert pool.plan(c) == ([b], None)
    b.in_flight = 1
    victims, short = pool.plan(c)
    assert victims == [] and short is not None and short.kind == "max_loaded"
    assert "holding the room: a (1 in flight), b (1 in flight)" in pool.waiting_reason(c, short)
    assert pool.never_fits(c) is None


async def test_pool_never_takes_a_pinned_model_and_refuses_what_never_fits(tmp_path: Path) -> None:
    host = Host(Ledger(cpus=[0, 1], memory_mb=4000))
    pool = ModelPool(host, OnDemandPolicy(memory_budget_mb=1200))
    model(host, tmp_path, "p", loaded_at=1.0, pinned=True)
    b = model(host, tmp_path, "b", loaded_at=2.0)
    c = model(host, tmp_path, "c", loaded_at=None, memory_mb=600)
    victims, short = pool.plan(c)
    assert victims == [b] and short is None
    huge = model(host, tmp_path, "huge", loaded_at=None, memory_mb=5000)
    assert pool.never_fits(huge) == (
        "model 'huge' can never be loaded here: needs memory_mb=5000, 1200 MB of "
        "memory_budget_mb=1200 are free, with no other on-demand model loaded"
    )
    pool.want(huge)  # refused at once: no load starts
    assert huge.demand is not None and huge.demand.loading is None
    assert huge.refusal is not None and huge.refusal.status == 400


async def test_admin_load_unload_bodies(tmp_path: Path) -> None:
    spec = parse_endpoint(
        {"name": "ep", "components": [{"name": "a", "copies": 1}, {"name": "m", "on_demand": {}}]}
    )
    manager = EndpointManager(spec, ledger=Ledger(cpus=[0], memory_mb=2000), log_dir=tmp_path)
    for s in spec.components:
        manager.components[s.name] = Component(s, ResolvedModel(tmp_path / "m.gguf"))
    app = FastAPI()
    app.include_router(create_admin(LocalAdmin(manager, lambda: None)))
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://endpoint") as c:
        r = await c.post("/admin/models/load", json={"model": "m", "wait": "yes"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "wait"
        r = await c.post("/admin/models/load", json={"name": "m"})
        assert r.status_code == 422 and r.json()["error"]["field"] in ("model", "name")
        r = await c.post("/admin/models/unload", json={"model": "a"})
        assert r.status_code == 422 and "not loaded on demand" in r.json()["error"]["message"]
        r = await c.post("/admin/models/unload", json={"model": "zz"})
        assert r.status_code == 404
        r = await c.post("/admin/models/unload", json={"model": "m"})
        assert r.json() == {"unloaded": None, "state": "unloaded"}
        r = await c.post("/admin/models/reload")
        assert r.status_code == 422 and "no models_dir" in r.json()["error"]["message"]
        r = await c.post("/admin/scale", json={"component": "m", "copies": 2})
        assert r.status_code == 422 and "loaded on demand" in r.json()["error"]["message"]


async def test_pool_takes_an_idle_model_whose_copy_restarts(tmp_path: Path) -> None:
    host = Host(Ledger(cpus=[0, 1], memory_mb=4000))
    pool = ModelPool(host, OnDemandPolicy(max_loaded=2))
    a = model(host, tmp_path, "a", loaded_at=1.0)
    b = model(host, tmp_path, "b", loaded_at=2.0)
    c = model(host, tmp_path, "c", loaded_at=None)
    b.replicas[0].state = ReplicaState.FAILED  # missed its pings: restarting, holding its room
    a.demand.last_used = 3.0  # type: ignore[union-attr]
    assert pool.plan(c) == ([b], None)
    b.in_flight = 1  # a request waits for the restarted copy: kept
    assert pool.plan(c) == ([a], None)


def test_keep_alive_expiry(tmp_path: Path) -> None:
    host = Host(Ledger(cpus=[0, 1], memory_mb=4000))
    pool = ModelPool(host, OnDemandPolicy())
    spec = {"num_cpus": 0.5, "memory_mb": 100}
    comps = {}
    for name, on_demand in (
        ("default", {}),
        ("never", {"keep_alive": -1}),
        ("now", {"keep_alive": 0}),
        ("pinned", {"pinned": True, "keep_alive": 0}),
    ):
        s = ComponentSpec(name=name, resources=spec, on_demand=on_demand)  # type: ignore[arg-type]
        comp = Component(s, ResolvedModel(tmp_path / f"{name}.gguf"))
        r = Replica(s, 0, comp.model, place(host.ledger, name, s.resources), tmp_path)
        r.state = ReplicaState.READY
        comp.replicas.append(r)
        assert comp.demand is not None
        comp.demand.last_used = 1000.0
        host.components[name] = comp
        comps[name] = comp
    assert {c.name for c in pool.expired(1000.0)} == {"now"}
    assert {c.name for c in pool.expired(1299.0)} == {"now"}
    assert {c.name for c in pool.expired(1300.0)} == {"now", "default"}  # 300 s by default
    comps["now"].in_flight = 1  # busy: never idle
    comps["default"].demand.request_keep_alive = -1  # type: ignore[union-attr]  # a request said never
    assert pool.expired(10**9) == []
    comps["never"].demand.request_keep_alive = 5  # type: ignore[union-attr]  # a request shortened it
    assert [c.name for c in pool.expired(1005.0)] == ["never"]
    comps["never"].replicas[0].state = ReplicaState.DRAINING  # already unloading: not again
    assert pool.expired(1005.0) == []


def test_command_line_options_over_an_endpoint_file(tmp_path: Path) -> None:
    from llmhost.endpoint.cli import endpoint_spec

    none: dict[str, Any] = dict(
        models_dir=None,
        max_loaded=None,
        memory_budget_mb=None,
        keep_alive=None,
        client_keep_alive=None,
        preload=None,
        jobs_dir=None,
    )
    spec = endpoint_spec(
        None, {**none, "models_dir": tmp_path, "keep_alive": 0, "max_loaded": 2, "preload": ["a"]}
    )
    assert spec.models_dir is not None and spec.models_dir.path == str(tmp_path)
    assert spec.models_dir.defaults == {"on_demand": {"keep_alive": 0}}
    assert (spec.on_demand.max_loaded, spec.on_demand.preload) == (2, ["a"])
    file = tmp_path / "ep.yaml"
    file.write_text(
        "name: e\nmodels_dir: {path: models, defaults: {max_wait_s: 5}}\n"
        "on_demand: {memory_budget_mb: 900, client_keep_alive: any}\n"
    )
    spec = endpoint_spec(file, {**none, "memory_budget_mb": 800})
    assert spec.models_dir is not None and spec.models_dir.path == str(tmp_path / "models")  # beside the file
    assert spec.models_dir.defaults == {"max_wait_s": 5}
    assert (spec.on_demand.memory_budget_mb, spec.on_demand.client_keep_alive) == (800, "any")
    with pytest.raises(SpecError, match="give an endpoint file, or --models-dir DIR"):
        endpoint_spec(None, none)
    with pytest.raises(SpecError, match="client_keep_alive"):
        endpoint_spec(None, {**none, "models_dir": tmp_path, "client_keep_alive": "sometimes"})


def test_an_estimate_counts_the_weights_the_running_sequences_kv_and_a_projector(tmp_path: Path) -> None:
    from llmhost.endpoint.control.modelsdir import PROCESS_OVERHEAD_MB, estimated_memory_mb
    from llmhost.store import resolve_model

    gguf = resolve_model()
    size = gguf.stat().st_size

    def mb(kv_bytes: float) -> int:
        return math.ceil((size + kv_bytes) / 2**20) + PROCESS_OVERHEAD_MB

    four = {"max_concurrent": 4, "max_total_tokens": 2048, "max_input_tokens": 1024}
    # Gemma 3 270M: 18 KiB of f16 KV a position; 4 running sequences of 2,048 positions, all kept: 144 MiB
    assert estimated_memory_mb(gguf, {**four, "swa_full": True}) == mb(144 * 2**20)
    q8 = estimated_memory_mb(gguf, {**four, "swa_full": True, "cache_type_k": "q8_0", "cache_type_v": "q8_0"})
    assert q8 == mb(76.5 * 2**20)
    # by default its 15 sliding-window layers hold their 512-position window and a micro-batch (1,024
    # cells), 3 full layers every position; and the checkpoints' budget: one of 511 cells each (with
    # each cell's position and sequence, and the headers of the 3 a sequence may keep)
    windowed = 4 * (3 * 2048 + 15 * 1024) * 1024 + 4 * (511 * (15 * 1024 + 12) + 3 * 2048)
    assert estimated_memory_mb(gguf, four) == mb(windowed)
    # settings a start refuses (an input limit not below the total) count every position whole
    assert estimated_memory_mb(gguf, {"max_concurrent": 4, "max_total_tokens": 2048}) == mb(144 * 2**20)
    # speculation keeps every position (swa_full) and verifies up to 12 guesses a sequence: 48 logits
    # rows of its 262,144 tokens, twice
    assert estimated_memory_mb(gguf, {**four, "speculative": "ngram"}) == mb((144 + 2 * 48) * 2**20)
    # a projector, as the copy's own memory fit counts it (projector_memory.py)
    mmproj = build_gemma3_mmproj(tmp_path / "mmproj.gguf")
    share = projector_memory(mmproj).total_bytes
    assert estimated_memory_mb(gguf, {**four, "mmproj": str(mmproj)}) == mb(windowed + share)
