"""`endpoint up --ray`'s deploy, wait and stop, against Ray Serve's REST API faked in-process (no Ray
needed): what stays deployed after a signal while starting, a failed start, a refused deploy, `down`."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import pytest

from llmhost.endpoint.rayserve import nodes, up
from llmhost.endpoint.rayserve.options import AppArgs, RayTiming
from llmhost.endpoint.rayserve.serveapi import ServeApiError
from llmhost.endpoint.rayserve.up import RayEndpointError, RayUp
from llmhost.endpoint.spec import EndpointSpec, parse_endpoint
from tests.unit.endpoint.ray_fakes import URL, FakeServe, deployment, replica

SPEC = parse_endpoint({"name": "e", "components": [{"name": "a", "startup_health_check_timeout_s": 30}]})
UP = RayUp(None, host="127.0.0.1", port=8000, timing=RayTiming(placement_timeout_s=5, drain_timeout_s=1))


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(up, "POLL_S", 0.02)


def args(spec: EndpointSpec = SPEC) -> AppArgs:
    return AppArgs(spec.model_dump(), {}, asdict(UP.timing), URL, [], {}, "info")


def set_status(serve: FakeServe, app: str, component: dict[str, Any] | None = None) -> None:
    found = serve.details["applications"]["e"]
    found["status"] = app
    if component is not None:
        found["deployments"] = {"a": component}


async def until(what: str, check: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"no {what} within {timeout} s"
        await asyncio.sleep(0.01)


async def test_a_signal_while_starting_removes_the_application() -> None:
    serve = FakeServe()
    serve.app("theirs")
    stop = asyncio.Event()
    task = asyncio.create_task(up.deploy_and_serve(serve.api(), SPEC, UP, args(), stop))
    await until("the deploy", lambda: "e" in serve.details["applications"])
    stop.set()  # as SIGTERM does: Ray Serve still says DEPLOYING
    assert await asyncio.wait_for(task, 5) == "signalled while starting"
    assert list(serve.details["applications"]) == ["theirs"]


async def test_a_failed_start_removes_the_application_and_says_why() -> None:
    serve = FakeServe()
    serve.on_put = lambda _: (
        serve.details["applications"].get("e")
        and set_status(
            serve, "DEPLOYING", deployment(status="DEPLOY_FAILED", message="ImportError: no llmhost")
        )
    )
    with pytest.raises(RayEndpointError, match="component 'a': Ray Serve says DEPLOY_FAILED: ImportError"):
        await asyncio.wait_for(up.deploy_and_serve(serve.api(), SPEC, UP, args(), asyncio.Event()), 5)
    assert serve.details["applications"] == {}


async def test_a_start_past_its_timeout_removes_the_application(monkeypatch: pytest.MonkeyPatch) -> None:
    serve = FakeServe()
    spec = parse_endpoint({"name": "e", "components": [{"name": "a", "startup_health_check_timeout_s": 0.1}]})
    quick = RayUp(None, port=8000, host="127.0.0.1", timing=RayTiming(placement_timeout_s=0.1))
    with pytest.raises(RayEndpointError, match=r"not running within 0\.2 s; Ray Serve says DEPLOYING"):
        await asyncio.wait_for(up.deploy_and_serve(serve.api(), spec, quick, args(spec), asyncio.Event()), 5)
    assert serve.details["applications"] == {}


async def test_a_refused_deploy_leaves_the_cluster_as_it_was() -> None:
    serve = FakeServe()
    serve.app("e", config={"name": "e", "import_path": "older:build"})  # another `up` of the same name
    serve.refuse_puts = [(400, "1 validation error")]
    with pytest.raises(ServeApiError, match="deploying failed: 400 1 validation error"):
        await up.deploy_and_serve(serve.api(), SPEC, UP, args(), asyncio.Event())
    assert serve.puts == []  # not deployed, so not removed either
    assert serve.details["applications"]["e"]["deployed_app_config"]["import_path"] == "older:build"


async def test_serve_on_another_port_or_host_is_refused_before_anything_is_deployed() -> None:
    serve = FakeServe()  # its proxy runs on 127.0.0.1:8000
    for other, flag in (
        (RayUp(None, host="127.0.0.1", port=9000), "--port 8000"),
        (RayUp(None, host="0.0.0.0", port=8000), "--host 127.0.0.1"),
    ):
        with pytest.raises(RayEndpointError, match=f"use {flag}"):
            await up.deploy_and_serve(serve.api(), SPEC, other, args(), asyncio.Event())
    assert serve.puts == []
    await up.check_http(FakeServe(running=False).api(), RayUp(None, port=9000))  # Serve starts with ours


async def test_running_until_down_or_a_signal() -> None:
    serve = FakeServe()
    serve.on_put = lambda _: serve.details["applications"].get("e") and set_status(serve, "RUNNING")
    task = asyncio.create_task(up.deploy_and_serve(serve.api(), SPEC, UP, args(), asyncio.Event()))
    await until("running", lambda: serve.details["applications"].get("e", {}).get("status") == "RUNNING")
    serve.details["applications"].pop("e")  # `endpoint down` deleted it through the ingress
    assert await asyncio.wait_for(task, 5) == "the application was deleted (endpoint down)"
    stop = asyncio.Event()
    task = asyncio.create_task(up.deploy_and_serve(serve.api(), SPEC, UP, args(), stop))
    await until("running", lambda: serve.details["applications"].get("e", {}).get("status") == "RUNNING")
    stop.set()
    assert await asyncio.wait_for(task, 5) == "signalled"
    assert serve.details["applications"] == {}


async def test_a_component_fitting_no_node_is_refused_in_our_words_then_rays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serve = FakeServe()
    waiting = deployment(
        replica("a0", "STARTING"),
        target=1,
        required={"CPU": 4.0},
        message="1 replicas that have taken more than 3s to be scheduled",
    )
    serve.on_put = lambda body: set_status(serve, "DEPLOYING", waiting) if body["applications"] else None
    monkeypatch.setattr(nodes, "resources", lambda: ([{"CPU": 1.0}], {"CPU": 1.0}))
    with pytest.raises(RayEndpointError, match=r"component 'a' \(1 CPUs, 1024 MB per copy\) does not fit"):
        await asyncio.wait_for(up.deploy_and_serve(serve.api(), SPEC, UP, args(), asyncio.Event()), 5)
    assert serve.details["applications"] == {}


def test_where_up_reaches_the_dashboard() -> None:
    assert up.dashboard_for(None, "http://127.0.0.1:8265", None) == "http://127.0.0.1:8265"
    assert up.dashboard_for("auto", "http://127.0.0.1:8265", None) == "http://127.0.0.1:8265"
    # ray://: the head's view of itself is loopback; `up` runs elsewhere and reaches it on the head's host
    assert up.dashboard_for("ray://head.example:10001", "127.0.0.1:8265", None) == "http://head.example:8265"
    assert up.dashboard_for("ray://head:10001", "http://10.0.0.5:8265", None) == "http://10.0.0.5:8265"
    assert up.dashboard_for("ray://head:10001", "127.0.0.1:8265", "http://tunnel:1") == "http://tunnel:1"


def test_bad_up_settings_are_refused() -> None:
    with pytest.raises(ValueError, match=r"port must be in 1\.\.65535"):
        RayUp(None, port=0)
    with pytest.raises(ValueError, match=r"log level must be one of debug, info, warning, error, got 'loud'"):
        RayUp(None, log_level="loud")


def test_a_ray_without_its_dashboard_is_refused_and_still_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    calls: list[str] = []

    class NoDashboard:
        dashboard_url = ""

    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(f"init {kw['address']}") or NoDashboard())
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    with pytest.raises(RayEndpointError, match="the Ray dashboard is not running"):
        up.run(SPEC, UP)
    assert calls == ["init local", "shutdown"]  # the Ray it started does not outlive it
