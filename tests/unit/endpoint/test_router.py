"""The router against fake copies (httpx.MockTransport): routing, least outstanding requests, retries,
streams cut mid-way, waiting for a copy, and /metrics relabelling."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from llmhost.console.front import console_families
from llmhost.console.timeseries import Point, SeriesStore
from llmhost.endpoint.control.backend import LocalBackend
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.placement import Allocation
from llmhost.endpoint.control.replica import Replica, ReplicaState
from llmhost.endpoint.dataplane.router import COMPONENT_HEADER, COPY_HEADER, Proxy, create_router
from llmhost.endpoint.metrics import metrics_routes, relabel
from llmhost.endpoint.spec import ComponentSpec
from llmhost.process.lifecycle import Lifecycle
from llmhost.store import ResolvedModel

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


class Registry:
    def __init__(self, *components: Component, wait_s: float = 2.0) -> None:
        self.components = {c.name: c for c in components}
        self.wanted: list[str] = []
        self.wait_s = wait_s

    def every(self) -> list[Component]:  # what the single-host back end's /metrics reads of the manager
        return list(self.components.values())

    def copy_wanted(self, component: Component) -> None:
        self.wanted.append(component.name)

    def wait_timeout_s(self, component: Component) -> float:
        return self.wait_s


def component(name: str, ports: list[int], tmp: Path) -> Component:
    spec = ComponentSpec(name=name)
    comp = Component(spec, ResolvedModel(tmp / "model.gguf"))
    for port in ports:
        r = Replica(
            spec, comp.new_index(), comp.model, Allocation((0,), 1.0, 1, 100), tmp, on_change=comp.notify
        )
        r.port = port
        r.state = ReplicaState.READY
        comp.replicas.append(r)
    return comp


class CutStream(httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'data: {"token": 1}\n\n'
        yield b'data: {"tok'
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


def fake_copies(behaviour: dict[int, str], seen: list[tuple[int, str, Any]]) -> Handler:
    """Per port: 'ok' answers JSON naming the port, 'refuse' refuses connections, 'reset' drops the
    connection after reading the request, 'cut' cuts a stream, 'slow' answers after 0.3 s."""

    async def handle(request: httpx.Request) -> httpx.Response:
        port = request.url.port or 0
        try:
            body = json.loads(request.content) if request.content else None
        except (ValueError, RecursionError):
            body = request.content
        seen.append((port, request.url.path, body))
        kind = behaviour.get(port, "ok")
        if kind == "refuse":
            raise httpx.ConnectError("connection refused", request=request)
        if kind == "reset":
            raise httpx.RemoteProtocolError("Server disconnected without a response.", request=request)
        if kind == "cut":
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=CutStream())
        if kind == "slow":
            await asyncio.sleep(0.3)
        if request.url.path == "/metrics":
            text = (
                "# HELP llmhost_requests_total Requests\n# TYPE llmhost_requests_total counter\n"
                'llmhost_requests_total{api="openai"} 3.0\n'
            )
            return httpx.Response(200, text=text)
        return httpx.Response(200, json={"port": port, "path": request.url.path})

    return handle


def app_for(registry: Registry, handler: Handler) -> tuple[FastAPI, Proxy]:
    proxy = Proxy(registry, httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    app = FastAPI()
    app.include_router(metrics_routes(LocalBackend(registry, proxy.client)))
    app.include_router(create_router(registry, proxy, Lifecycle()))
    return app, proxy


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://endpoint")


async def test_routes_by_header_model_or_only_component(tmp_path: Path) -> None:
    seen: list[tuple[int, str, Any]] = []
    reg = Registry(component("a", [1001], tmp_path), component("b", [2001], tmp_path))
    app, _ = app_for(reg, fake_copies({}, seen))
    async with client(app) as c:
        r = await c.post("/invocations", headers={COMPONENT_HEADER: "b"}, json={"inputs": "hi"})
        assert r.status_code == 200 and r.json()["port"] == 2001 and r.headers[COPY_HEADER] == "b-0"
        r = await c.post("/v1/chat/completions", json={"model": "a", "messages": []})
        assert r.json() == {"port": 1001, "path": "/v1/chat/completions"}
        r = await c.post("/invocations", headers={COMPONENT_HEADER: "zz"}, json={})
        assert r.status_code == 404
        err = r.json()["error"]
        assert err["message"] == "unknown inference component 'zz'; known components: a, b"
        assert err["code"] == 404 and err["field"] == COMPONENT_HEADER
        r = await c.post("/v1/completions", json={"model": "gpt-4", "prompt": "x"})
        assert r.status_code == 404 and "known components: a, b" in r.json()["error"]["message"]
        r = await c.post("/invocations", json={"inputs": "hi"})
        assert r.status_code == 400 and COMPONENT_HEADER in r.json()["error"]["message"]
        models = (await c.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["a", "b"]
        assert (await c.get("/ping")).status_code == 200
    only = Registry(component("solo", [3001], tmp_path))
    app, _ = app_for(only, fake_copies({}, seen))
    async with client(app) as c:
        assert (await c.post("/invocations", json={"inputs": "hi"})).json()["port"] == 3001
        assert (await c.post("/generate", json={"inputs": "hi"})).json()["path"] == "/generate"
        assert (await c.post("/v1/completions", json={"prompt": "no model"})).json()["port"] == 3001


async def test_batch_transform_is_relayed_to_a_copy_whole(tmp_path: Path) -> None:
    """/execution-parameters is a copy's; a JSON Lines /invocations body goes to one copy, unsplit."""
    seen: list[tuple[int, str, Any]] = []
    reg = Registry(component("a", [1001], tmp_path), component("b", [2001], tmp_path))
    app, _ = app_for(reg, fake_copies({}, seen))
    body = b'{"prompt": "a"}\n{"messages": []}\n'
    async with client(app) as c:
        r = await c.get("/execution-parameters", headers={COMPONENT_HEADER: "b"})
        assert r.json() == {"port": 2001, "path": "/execution-parameters"}
        assert (await c.get("/execution-parameters")).status_code == 400  # two components, none named
        jsonlines = {COMPONENT_HEADER: "a", "content-type": "application/jsonlines"}
        r = await c.post("/invocations", headers=jsonlines, content=body)
        assert r.json() == {"port": 1001, "path": "/invocations"}
    assert seen[-1] == (1001, "/invocations", body)  # not JSON: the fake copy kept the raw bytes


async def test_tokenizer_routes_pick_by_body_model_query_header_or_only_component(tmp_path: Path) -> None:
    seen: list[tuple[int, str, Any]] = []
    reg = Registry(component("a", [1001], tmp_path), component("b", [2001], tmp_path))
    app, _ = app_for(reg, fake_copies({}, seen))
    async with client(app) as c:
        r = await c.get("/tokenizer_info", params={"model": "b"})
        assert r.json() == {"port": 2001, "path": "/tokenizer_info"}
        r = await c.get("/tokenizer_info", headers={COMPONENT_HEADER: "a"})
        assert r.json()["port"] == 1001
        r = await c.get("/tokenizer_info")
        assert r.status_code == 400 and r.json()["error"]["field"] == "model"
        assert "?model=" in r.json()["error"]["message"] and "a, b" in r.json()["error"]["message"]
        r = await c.get("/tokenizer_info", params={"model": "zz"})
        assert r.status_code == 404 and r.json()["error"]["field"] == "model"
        # vLLM's /tokenize and /detokenize carry `model`; llama-server's callers name it in the header
        r = await c.post("/tokenize", json={"prompt": "x", "model": "b"})
        assert r.json() == {"port": 2001, "path": "/tokenize"}
        r = await c.post("/detokenize", headers={COMPONENT_HEADER: "a"}, json={"tokens": [1]})
        assert r.json() == {"port": 1001, "path": "/detokenize"}
        r = await c.post("/tokenize", json={"content": "x"})
        assert r.status_code == 400 and COMPONENT_HEADER in r.json()["error"]["message"]
    assert seen[0] == (2001, "/tokenizer_info", None)
    only = Registry(component("solo", [3001], tmp_path))
    app, _ = app_for(only, fake_copies({}, seen))
    async with client(app) as c:
        assert (await c.get("/tokenizer_info")).json()["port"] == 3001
        assert (await c.post("/tokenize", json={"prompt": "x"})).json()["port"] == 3001


def test_least_outstanding_requests(tmp_path: Path) -> None:
    comp = component("a", [1, 2, 3], tmp_path)
    r0, r1, r2 = comp.replicas
    r0.outstanding, r1.outstanding, r2.outstanding = 2, 0, 1
    assert comp.pick() is r1
    r1.outstanding = 3
    assert comp.pick() is r2
    r2.state = ReplicaState.DRAINING
    assert comp.pick() is r0
    assert comp.pick(exclude={r0.key}) is r1
    r0.restarts += 1  # it failed and came back: a new key, eligible again
    r0.outstanding = 9
    assert comp.pick(exclude={"a-0#0"}) is r1 and comp.pick(exclude={r1.key}) is r0
    r0.outstanding = 2
    r0.outstanding = r1.outstanding = 0
    r0.served, r1.served = 5, 1
    assert comp.pick() is r1  # tie on load: the one that served fewer


async def test_requests_spread_over_copies_under_concurrency(tmp_path: Path) -> None:
    seen: list[tuple[int, str, Any]] = []
    comp = component("a", [1001, 1002], tmp_path)
    app, _ = app_for(Registry(comp), fake_copies({1001: "slow", 1002: "slow"}, seen))
    async with client(app) as c:
        rs = await asyncio.gather(*(c.post("/v1/completions", json={"model": "a"}) for _ in range(6)))
    assert all(r.status_code == 200 for r in rs)
    assert sorted(p for p, _, _ in seen) == [1001] * 3 + [1002] * 3
    assert [r.outstanding for r in comp.replicas] == [0, 0] and comp.in_flight == 0


async def test_refused_connection_is_retried_on_another_copy(tmp_path: Path) -> None:
    seen: list[tuple[int, str, Any]] = []
    comp = component("a", [1001, 1002], tmp_path)
    comp.replicas[1].served = 10  # the refusing copy is picked first
    app, _ = app_for(Registry(comp), fake_copies({1001: "refuse"}, seen))
    async with client(app) as c:
        r = await c.post("/invocations", json={"inputs": "hi"})
    assert r.status_code == 200 and r.json()["port"] == 1002 and r.headers[COPY_HEADER] == "a-1"
    assert [p for p, _, _ in seen] == [1001, 1002] and comp.retries == 1
    assert seen[0][2] == seen[1][2] == {"inputs": "hi"}  # the same body again
    assert [x.outstanding for x in comp.replicas] == [0, 0]


async def test_a_copy_restarted_while_its_connect_failed_is_tried_again(tmp_path: Path) -> None:
    """The copy died, and its supervisor restarts it (a new key) while a request's connection to it is
    being refused: the request waits for the new copy rather than counting it as tried."""
    comp = component("a", [1001], tmp_path)
    copy = comp.replicas[0]
    seen: list[tuple[int, str, Any]] = []
    ok = fake_copies({}, seen)

    async def back_on_a_new_port() -> None:
        await asyncio.sleep(0.2)
        copy.port = 1002
        copy.set_state(ReplicaState.READY)

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.port == 1001:
            seen.append((1001, request.url.path, None))
            copy.restarts += 1  # the watcher saw the death meanwhile
            copy.set_state(ReplicaState.FAILED)
            restart.append(asyncio.create_task(back_on_a_new_port()))
            raise httpx.ConnectError("All connection attempts failed", request=request)
        return await ok(request)

    restart: list[asyncio.Task[None]] = []
    app, _ = app_for(Registry(comp, wait_s=5), handle)
    async with client(app) as c:
        r = await c.post("/invocations", json={"inputs": "hi"})
    await asyncio.gather(*restart)
    assert r.status_code == 200 and r.json()["port"] == 1002, r.text
    assert [p for p, _, _ in seen] == [1001, 1002] and comp.retries == 1 and copy.outstanding == 0


async def test_every_copy_refusing_is_an_explicit_error(tmp_path: Path) -> None:
    comp = component("a", [1001, 1002], tmp_path)
    app, _ = app_for(Registry(comp, wait_s=0.5), fake_copies({1001: "refuse", 1002: "refuse"}, []))
    async with client(app) as c:
        r = await c.post("/invocations", json={"inputs": "hi"})
    assert r.status_code in (502, 503)
    assert "connection refused" in r.json()["error"]["message"]
    assert comp.in_flight == 0 and [x.outstanding for x in comp.replicas] == [0, 0]


async def test_cut_stream_ends_with_an_error_event(tmp_path: Path) -> None:
    comp = component("a", [1001], tmp_path)
    app, _ = app_for(Registry(comp), fake_copies({1001: "cut"}, []))
    async with client(app) as c:
        r = await c.post("/v1/completions", json={"model": "a", "stream": True})
    assert r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e.strip()]
    assert events[0] == 'data: {"token": 1}'
    last = json.loads(events[-1].removeprefix("data: "))
    assert last["error"]["type"] == "upstream_error" and "failed mid-stream" in last["error"]["message"]
    assert comp.stream_errors == 1 and comp.in_flight == 0 and comp.replicas[0].outstanding == 0


async def test_request_waits_for_a_copy_then_is_served(tmp_path: Path) -> None:
    comp = component("a", [1001], tmp_path)
    comp.replicas[0].state = ReplicaState.STARTING
    reg = Registry(comp, wait_s=5)
    app, _ = app_for(reg, fake_copies({}, []))

    async def ready_later() -> None:
        await asyncio.sleep(0.3)
        comp.replicas[0].state = ReplicaState.READY
        comp.notify()

    async with client(app) as c:
        assert (await c.get("/ping")).status_code == 503
        r, _ = await asyncio.gather(c.post("/invocations", json={"inputs": "hi"}), ready_later())
        assert r.status_code == 200 and reg.wanted == ["a"]
        assert (await c.get("/ping")).status_code == 200


async def test_waiting_for_a_copy_is_bounded(tmp_path: Path) -> None:
    comp = component("a", [], tmp_path)
    reg = Registry(comp, wait_s=0.3)
    app, _ = app_for(reg, fake_copies({}, []))
    async with client(app) as c:
        assert (await c.get("/ping")).status_code == 200  # scaled to zero on purpose
        r = await c.post("/invocations", json={"inputs": "hi"})
    assert r.status_code == 503
    assert r.json()["error"]["message"] == "no ready copy of inference component 'a' within 0.3 s"
    assert comp.waiting == 0 and comp.in_flight == 0


async def test_a_request_that_reached_a_copy_is_never_sent_again(tmp_path: Path) -> None:
    seen: list[tuple[int, str, Any]] = []
    comp = component("a", [1001, 1002], tmp_path)
    comp.replicas[1].served = 10  # the failing copy is picked first
    app, _ = app_for(Registry(comp), fake_copies({1001: "reset"}, seen))
    async with client(app) as c:
        r = await c.post("/invocations", json={"inputs": "hi"}, headers={"X-Request-Id": "rid-1"})
    assert r.status_code == 502 and [p for p, _, _ in seen] == [1001], "replayed on another copy"
    message = r.json()["error"]["message"]
    assert "after the request reached it" in message and "not retried" in message
    assert comp.retries == 0 and comp.in_flight == 0 and [x.outstanding for x in comp.replicas] == [0, 0]


async def test_metrics_aggregate_per_component_and_copy(tmp_path: Path) -> None:
    reg = Registry(component("a", [1001, 1002], tmp_path), component("b", [2001], tmp_path))
    app, _ = app_for(reg, fake_copies({}, []))
    async with client(app) as c:
        text = (await c.get("/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = families["llmhost_requests"]
    assert requests.type == "counter" and text.count("# TYPE llmhost_requests_total counter") == 1
    got = {
        (s.labels["component"], s.labels["copy"]): s.value
        for s in requests.samples
        if s.name == "llmhost_requests_total" and s.labels.get("api") == "openai"
    }
    assert got == {("a", "a-0"): 3.0, ("a", "a-1"): 3.0, ("b", "b-0"): 3.0}
    copy_samples = families["llmhost_endpoint_copies"].samples
    copies = {(s.labels["component"], s.labels["state"]): s.value for s in copy_samples}
    assert copies[("a", "ready")] == 2 and copies[("b", "ready")] == 1 and copies[("a", "failed")] == 0


def test_relabel_keeps_families_together() -> None:
    merged: dict[str, Metric] = {}
    text = '# HELP g A gauge\n# TYPE g gauge\ng 1.0\n# TYPE h histogram\nh_bucket{le="1"} 2\nh_count 2\n'
    relabel(text_string_to_metric_families(text), {"copy": "x"}, merged)
    relabel(text_string_to_metric_families(text), {"copy": "y"}, merged)
    assert list(merged) == ["g", "h"] and merged["g"].documentation == "A gauge"
    assert [(s.labels, s.value) for s in merged["g"].samples] == [({"copy": "x"}, 1.0), ({"copy": "y"}, 1.0)]
    assert merged["h"].samples[0].labels == {"copy": "x", "le": "1"} and len(merged["h"].samples) == 4


async def test_bodies_the_router_cannot_read_go_to_the_copy(tmp_path: Path) -> None:
    seen: list[tuple[int, str, Any]] = []
    app, _ = app_for(Registry(component("solo", [3001], tmp_path)), fake_copies({}, seen))
    deep = b'{"model": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    async with client(app) as c:
        for raw in (deep, b"not json", b"\xff"):
            r = await c.post("/v1/completions", content=raw, headers={"content-type": "application/json"})
            assert r.status_code != 500, r.text


def test_idle_connections_to_copies_are_dropped_before_the_copy_closes_them() -> None:
    """At equal timeouts (httpx's default expiry and uvicorn's default keep-alive, both 5 s) the pool could
    reuse a connection the copy was closing at that moment: a 502 ("Server disconnected without sending a
    response"), not retried. The pool drops idle connections at half the copies' keep-alive."""
    from llmhost.endpoint.dataplane.router import POOL_LIMITS
    from llmhost.process.lifecycle import KEEP_ALIVE_S

    assert POOL_LIMITS.keepalive_expiry is not None and POOL_LIMITS.keepalive_expiry <= KEEP_ALIVE_S / 2


async def test_metrics_show_the_endpoints_console_figures_not_the_copies(tmp_path: Path) -> None:
    """A copy is a server with its own console: its console families are left out, the router's shown once."""
    copy_text = (
        "# HELP llmhost_console c\n# TYPE llmhost_console gauge\n"
        'llmhost_console{component="m",name="Invocations",unit="Count"} 99.0\n'
        "# HELP llmhost_requests_total Requests\n# TYPE llmhost_requests_total counter\n"
        'llmhost_requests_total{api="openai"} 3.0\n'
    )

    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=copy_text)

    reg = Registry(component("a", [1001], tmp_path))
    store = SeriesStore(period_s=5)
    store.record("a", Point(t=1.0, period_s=5, copies=1, invocations=7))
    proxy = Proxy(reg, httpx.AsyncClient(transport=httpx.MockTransport(handle)))
    app = FastAPI()
    app.include_router(metrics_routes(LocalBackend(reg, proxy.client), lambda: console_families(store)))
    app.include_router(create_router(reg, proxy, Lifecycle()))
    async with client(app) as c:
        text = (await c.get("/metrics")).text
    assert text.count("# TYPE llmhost_console gauge") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}
    invocations = [s for s in families["llmhost_console"].samples if s.labels["name"] == "Invocations"]
    assert [(s.labels, s.value) for s in invocations] == [
        ({"component": "a", "name": "Invocations", "unit": "Count"}, 7.0)
    ]
    assert [s.labels["copy"] for s in families["llmhost_requests"].samples] == ["a-0"]
