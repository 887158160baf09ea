"""A folder of real GGUFs behind one endpoint (`endpoint up --models-dir`), loaded on demand under a
memory budget of 1100 MB (two 500 MB models fit, the default model at 700 MB fits beside none): LRU
eviction, pinned models, one load for many requests, keep_alive (the model's and the request's), a
request during an unload, a model too large, folder re-scans, kill -9.

One endpoint serves every test of this module; each test starts by unloading what is loaded."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmhost.store.resolve import default_model_path
from tests.integration.conftest import SMOLLM2
from tests.integration.console_helpers import CHROMIUM, WAIT_MS, Watched, artifacts_dir, chromium
from tests.integration.endpoint_helpers import ENGINE, Endpoint, call, start_endpoint, stop_endpoint

# name -> (GGUF, its NAME.yaml or None). Links to the two real models under several names: each name is a
# model of its own to the endpoint (its own copy, its own room)
MODELS: dict[str, tuple[str, str | None]] = {
    "gemma": ("gemma", "resources: {memory_mb: 700}"),
    "smol": ("smol", None),
    "smol-b": ("smol", None),
    "smol-c": ("smol", None),
    "pinned-1": ("smol", "on_demand: {pinned: true}"),
    "pinned-2": ("smol", "on_demand: {pinned: true}"),
    "brief": ("smol", "on_demand: {keep_alive: 1}"),
    "hurried": ("smol", "max_wait_s: 2"),
    "huge": ("smol", "resources: {memory_mb: 10000000}"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    sources = {"gemma": default_model_path(), "smol": SMOLLM2}
    for name, (source, settings) in MODELS.items():
        (folder / f"{name}.gguf").symlink_to(sources[source])
        if settings is not None:
            (folder / f"{name}.yaml").write_text(settings + "\n")
    (folder / "README.txt").write_text("not a model\n")
    return folder


@pytest.fixture(scope="module")
def ep(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    endpoint = f"""
name: od
models_dir:
  path: {models}
  defaults:
    resources: {{num_cpus: 0.5, memory_mb: 500}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
    max_wait_s: 60
on_demand: {{client_keep_alive: shorten, preload: [pinned-1]}}
"""
    e = start_endpoint(
        tmp_path_factory.mktemp("od"),
        endpoint,
        args=(
            "--memory-budget-mb",
            "1100",
            # a copy slowed by a busy machine is not taken for hung
            "--health-timeout",
            "10",
            "--health-misses",
            "5",
        ),
    )
    yield e
    stop_endpoint(e)


def body(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "prompt": "Once upon a time", "max_tokens": 2, **extra}


def complete(ep: Endpoint, model: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{ep.url}/v1/completions", json=body(model, **extra), timeout=180)


def listed(ep: Endpoint) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in httpx.get(f"{ep.url}/v1/models", timeout=10).json()["data"]}


def states(ep: Endpoint) -> dict[str, str]:
    return {name: m["state"] for name, m in listed(ep).items()}


def demand(ep: Endpoint, name: str) -> dict[str, Any]:
    [comp] = [c for c in ep.status()["components"] if c["name"] == name]
    return dict(comp["on_demand"])


def loaded(ep: Endpoint) -> set[str]:
    return {name for name, state in states(ep).items() if state == "loaded"}


@pytest.fixture
def empty(ep: Endpoint) -> Endpoint:
    """Nothing loaded (pinned models unloaded too, through the admin API)."""
    for name, state in states(ep).items():
        if state != "unloaded":
            r = httpx.post(f"{ep.url}/admin/models/unload", json={"model": name}, timeout=120)
            assert r.status_code == 200, r.text
    assert loaded(ep) == set()
    return ep


def test_the_folder_is_listed_with_state_and_resources(ep: Endpoint) -> None:
    models = listed(ep)
    assert set(models) == set(MODELS)  # README.txt is no model
    ep.wait_for("pinned-1 preloaded", lambda: states(ep)["pinned-1"] == "loaded", timeout=120)
    models = listed(ep)
    assert all(m["state"] == "unloaded" for name, m in models.items() if name != "pinned-1")
    assert models["smol"]["resources"] == {"num_cpus": 0.5, "memory_mb": 500}
    assert models["gemma"]["resources"]["memory_mb"] == 700
    assert models["huge"]["resources"]["memory_mb"] == 10_000_000
    assert models["pinned-1"]["pinned"] and not models["smol"]["pinned"]
    assert models["brief"]["keep_alive"] == 1 and models["smol"]["keep_alive"] == 300
    status = ep.cli("status")
    assert status.returncode == 0, status.stderr
    assert "on-demand models (memory_budget_mb=1100)" in status.stdout


def test_a_third_model_unloads_the_least_recently_used(empty: Endpoint) -> None:
    ep = empty
    before = demand(ep, "smol")["evictions"].get("memory", 0)
    for name in ("smol", "smol-b", "smol-c"):
        r = complete(ep, name)
        assert r.status_code == 200 and r.json()["model"] == name, r.text
    assert loaded(ep) == {"smol-b", "smol-c"}  # smol, the least recently used, made room
    assert demand(ep, "smol")["evictions"]["memory"] == before + 1
    r = complete(ep, "gemma")  # 700 MB: both 500 MB models go
    assert r.status_code == 200, r.text
    assert loaded(ep) == {"gemma"}
    metrics = httpx.get(f"{ep.url}/metrics", timeout=10).text
    assert (
        f'llmhost_endpoint_model_evictions_total{{component="smol",reason="memory"}} {before + 1}.0'
        in metrics
    )
    assert 'llmhost_endpoint_model_evictions_total{component="smol-c",reason="memory"}' in metrics
    assert 'llmhost_endpoint_model_load_seconds_count{component="gemma"}' in metrics
    assert 'llmhost_endpoint_model_state{component="gemma",state="loaded"} 1.0' in metrics
    console_shows_on_demand(ep, before + 1)


def console_shows_on_demand(ep: Endpoint, smol_evictions: int) -> None:
    """The console's overview and page: the loading policy, each model's state and its evictions."""
    overview = httpx.get(f"{ep.url}/console/api/overview", timeout=30).json()
    assert overview["on_demand"]["memory_budget_mb"] == 1100
    assert overview["on_demand"]["models_dir"]
    by_name = {c["name"]: c["on_demand"] for c in overview["components"]}
    assert by_name["gemma"]["state"] == "loaded" and by_name["smol"]["evictions"]["memory"] == smol_evictions
    if CHROMIUM is not None:  # make test installs it; elsewhere the page check is skipped as in test_console
        for browser in chromium():
            w = Watched(browser, None)
            w.page.goto(f"{ep.url}/console")
            w.page.wait_for_selector('.comp[data-component="smol"] .on-demand', timeout=WAIT_MS)
            assert "memory budget 1100 MB" in w.page.inner_text("#facts")
            line = w.page.inner_text('.comp[data-component="smol"] .on-demand')
            assert "on demand: unloaded" in line and f"memory {smol_evictions}" in line, line
            assert w.page.get_attribute('.comp[data-component="gemma"] .on-demand', "data-state") == "loaded"
            w.page.screenshot(path=str(artifacts_dir() / "on-demand.png"), full_page=True)
            w.check_clean()
            w.close()


def test_a_pinned_model_is_never_chosen_and_no_room_in_time_is_a_503(empty: Endpoint) -> None:
    ep = empty
    for name in ("pinned-1", "smol", "smol-b"):  # pinned-1 is the least recently used
        assert complete(ep, name).status_code == 200
    assert loaded(ep) == {"pinned-1", "smol-b"}
    assert complete(ep, "pinned-2").status_code == 200  # smol-b goes, not pinned-1
    assert loaded(ep) == {"pinned-1", "pinned-2"}
    r = complete(ep, "hurried")  # max_wait_s: 2, and both loaded models are pinned
    assert r.status_code == 503 and r.headers["retry-after"], r.text
    message = r.json()["error"]["message"]
    assert "waiting for room to load model 'hurried'" in message and "pinned-1 (pinned)" in message
    assert "gave up after max_wait_s=2" in message
    assert states(ep)["hurried"] == "unloaded"


def test_eight_simultaneous_requests_cause_one_load(empty: Endpoint) -> None:
    ep = empty
    before = demand(ep, "gemma")["loads"]

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=ep.url, timeout=180) as c:
            outcomes = await asyncio.gather(*(call(c, "/v1/completions", body("gemma")) for _ in range(8)))
        return [o.status for o in outcomes]

    assert asyncio.run(burst()) == [200] * 8
    assert demand(ep, "gemma")["loads"] == before + 1


def test_a_model_too_large_is_a_400_naming_what_it_needs(ep: Endpoint) -> None:
    r = complete(ep, "huge")
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "model 'huge' can never be loaded here: " in error["message"]
    assert "needs memory_mb=10000000, 1100 MB of memory_budget_mb=1100 are free" in error["message"]
    assert error["field"] == "model"
    load = ep.cli("load", "huge")
    assert load.returncode == 1 and "can never be loaded" in load.stderr


def test_an_idle_model_unloads_after_its_keep_alive(empty: Endpoint) -> None:
    ep = empty
    assert complete(ep, "brief").status_code == 200  # keep_alive: 1
    ep.wait_for("brief unloaded when idle", lambda: states(ep)["brief"] == "unloaded", timeout=60)
    assert demand(ep, "brief")["unloads"].get("idle", 0) >= 1


def test_a_request_keep_alive_is_honoured_where_allowed(empty: Endpoint) -> None:
    ep = empty
    r = complete(ep, "smol", keep_alive="1h")  # longer than the model's 300 s: only shortening is allowed
    assert r.status_code == 400 and r.json()["error"]["field"] == "keep_alive", r.text
    assert "lets clients shorten it only" in r.json()["error"]["message"]
    assert states(ep)["smol"] == "unloaded"  # refused before anything was loaded
    r = complete(ep, "smol", keep_alive=0)
    assert r.status_code == 200, r.text
    ep.wait_for("smol unloaded right after", lambda: states(ep)["smol"] == "unloaded", timeout=60)
    assert demand(ep, "smol")["unloads"]["idle"] >= 1


def in_flight(ep: Endpoint, name: str) -> int:
    return int(next(c["in_flight"] for c in ep.status()["components"] if c["name"] == name))


def test_a_request_during_an_unload_waits_and_is_served(empty: Endpoint) -> None:
    ep = empty
    assert complete(ep, "smol-b").status_code == 200
    loads = demand(ep, "smol-b")["loads"]

    async def scenario() -> tuple[int, bool, int]:
        async with httpx.AsyncClient(base_url=ep.url, timeout=180) as c:
            long_body = body("smol-b", max_tokens=96, ignore_eos=True, stream=True)
            long = asyncio.create_task(call(c, "/v1/completions", long_body))
            while not await asyncio.to_thread(in_flight, ep, "smol-b"):
                await asyncio.sleep(0.05)
            unload = asyncio.create_task(asyncio.to_thread(ep.cli, "unload", "smol-b"))
            # the unload drains the long request: the model stays "unloading" until it ends
            while (await asyncio.to_thread(demand, ep, "smol-b"))["state"] == "loaded":
                await asyncio.sleep(0.05)
            during = await call(c, "/v1/completions", body("smol-b"))
            first = await long
            await unload
        return first.status, first.done, during.status

    first_status, first_done, during = asyncio.run(scenario())
    assert (first_status, first_done) == (200, True)  # drained, never cut
    assert during == 200
    assert demand(ep, "smol-b")["loads"] == loads + 1
    assert demand(ep, "smol-b")["unloads"]["admin"] >= 1


def test_kill_9_of_a_loaded_model_copy(empty: Endpoint) -> None:
    ep = empty
    assert complete(ep, "gemma").status_code == 200
    [victim] = ep.replicas("gemma")
    before = demand(ep, "gemma")["unloads"]
    os.kill(victim["pid"], signal.SIGKILL)
    # as for any endpoint copy, a request sent before the router saw the death may get an explicit 502;
    # once it has, the next request waits for the restarted copy (restarted in place, not reloaded)
    ep.wait_for(
        "the kill seen",
        lambda: (
            ep.replicas("gemma")[0]["state"] != "ready" or ep.replicas("gemma")[0]["pid"] != victim["pid"]
        ),
        timeout=60,
    )
    r = complete(ep, "gemma")
    assert r.status_code == 200, r.text
    [back] = ep.replicas("gemma")
    assert back["pid"] != victim["pid"] and back["restarts"] >= 1
    assert demand(ep, "gemma")["unloads"] == before  # restarted in place: no unload, no second load


def test_reload_adds_and_removes_models(ep: Endpoint, models: Path) -> None:
    (models / "late.gguf").symlink_to(SMOLLM2)
    try:
        out = ep.cli("reload")
        assert out.returncode == 0 and "added: late" in out.stdout, out.stderr
        assert listed(ep)["late"]["state"] == "unloaded"
        assert complete(ep, "late").status_code == 200
    finally:
        (models / "late.gguf").unlink()
    out = ep.cli("reload")
    assert out.returncode == 0 and "removed: late" in out.stdout, out.stderr
    assert "late" not in listed(ep)
    r = complete(ep, "late")
    assert r.status_code == 404 and "unknown inference component 'late'" in r.text
    (models / "clash").mkdir()
    (models / "clash" / "m.gguf").symlink_to(SMOLLM2)
    (models / "clash.gguf").symlink_to(SMOLLM2)
    try:
        out = ep.cli("reload")
        assert out.returncode == 1 and "name clash: clash and clash.gguf" in out.stderr, out.stderr
        assert "clash" not in listed(ep) and "smol-b" in listed(ep)  # a refused scan changes nothing
    finally:
        (models / "clash.gguf").unlink()
        (models / "clash" / "m.gguf").unlink()
        (models / "clash").rmdir()
