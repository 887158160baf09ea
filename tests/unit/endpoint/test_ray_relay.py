"""The Ray ingress's relay over deployment handles, with fake handles (no Ray needed): the shared
routing decisions, what reached a copy and what did not, streams and their failures."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
from fastapi import FastAPI

from llmhost.endpoint import routing
from llmhost.endpoint.rayserve.inprocess import Accepted, Call, Head
from llmhost.endpoint.rayserve.relay import RayComponent, RayRelay
from llmhost.endpoint.rayserve.status import DeploymentView, Replica
from llmhost.endpoint.routing import COMPONENT_HEADER, COPY_HEADER
from llmhost.endpoint.spec import ComponentSpec

SSE = Head(200, [("content-type", "text/event-stream")])
JSON = Head(200, [("content-type", "application/json"), ("x-request-id", "r1")])


class FakeStream:
    """A deployment handle's streaming answer: items in order; an exception is raised where it stands,
    a float is a pause."""

    def __init__(self, *items: Any) -> None:
        self.items = list(items)
        self.cancelled = False

    async def __anext__(self) -> Any:
        while self.items:
            item = self.items.pop(0)
            if isinstance(item, BaseException):
                raise item
            if not isinstance(item, float):
                return item
            await asyncio.sleep(item)
        raise StopAsyncIteration

    def cancel(self) -> None:
        self.cancelled = True


class FakeHandle:
    def __init__(self, *streams: FakeStream) -> None:
        self.streams: Iterator[FakeStream] = iter(streams)
        self.calls: list[Call] = []

    def options(self, **_: Any) -> FakeHandle:
        return self

    @property
    def handle(self) -> FakeHandle:  # the copy's method is named `handle`
        return self

    def remote(self, call: Call) -> FakeStream:
        self.calls.append(call)
        return next(self.streams)


class Registry:
    def __init__(self, **handles: FakeHandle) -> None:
        spec = {n: ComponentSpec(name=n, max_wait_s=0.3) for n in handles}
        self.components = {n: RayComponent(spec[n], h) for n, h in handles.items()}
        for c in self.components.values():
            running = Replica(f"{c.name}-x", "RUNNING", "n", "ip", 1, "a")
            c.view = DeploymentView(True, "HEALTHY", "", 1, (running,))


def client(registry: Registry) -> httpx.AsyncClient:
    app = FastAPI()
    app.include_router(routing.data_routes(registry, RayRelay(read_timeout_s=1.0)))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_routes_pick_the_component_and_relay_its_copys_answer() -> None:
    a = FakeHandle(FakeStream(Accepted("a-x"), JSON, b'{"ok":', b"1}"))
    b = FakeHandle(FakeStream(Accepted("b-y"), JSON, b"{}"))
    reg = Registry(a=a, b=b)
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"}, headers={"Authorization": "Bearer k"})
        assert r.status_code == 200 and r.json() == {"ok": 1} and r.headers[COPY_HEADER] == "a-x"
        r = await c.post("/invocations", json={}, headers={COMPONENT_HEADER: "b"})
        assert r.status_code == 200 and r.headers[COPY_HEADER] == "b-y"
        r = await c.post("/v1/completions", json={"model": "zz"})
        assert r.status_code == 404 and r.json()["error"]["message"].endswith("known components: a, b")
    (call,) = a.calls
    assert call.path == "/v1/completions" and call.body == b'{"model":"a"}'
    assert "authorization" not in {k.lower() for k, _ in call.headers}  # credentials stop at the ingress
    assert reg.components["a"].requests[200] == 1 and reg.components["a"].in_flight == 0


async def test_a_stream_passes_through_and_a_cut_ends_with_an_error_event() -> None:
    died = RuntimeError("copy died\nmore")
    h = FakeHandle(FakeStream(Accepted("a-x"), SSE, b"data: 1\n\n", b"data: 2", died),
                   FakeStream(Accepted("a-x"), SSE, b"data: 1\n\n", b"data: [DONE]\n\n"))  # fmt: skip
    reg = Registry(a=h)
    async with client(reg) as c:
        cut = (await c.post("/v1/completions", json={"model": "a", "stream": True})).text
        whole = (await c.post("/v1/completions", json={"model": "a", "stream": True})).text
    assert cut.startswith("data: 1\n\ndata: 2\n\ndata: {\"error\"")  # the partial event closed first
    assert "failed mid-stream: RuntimeError: copy died" in cut and "more" not in cut
    assert whole == "data: 1\n\ndata: [DONE]\n\n"
    assert reg.components["a"].stream_errors == 1 and reg.components["a"].in_flight == 0


async def test_a_request_no_copy_took_goes_to_another_one_that_reached_one_never_does() -> None:
    h = FakeHandle(FakeStream(ConnectionError("replica gone")), FakeStream(Accepted("a-2"), JSON, b"{}"),
                   FakeStream(Accepted("a-2"), RuntimeError("died")))  # fmt: skip
    reg = Registry(a=h)
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
        assert r.status_code == 200 and r.headers[COPY_HEADER] == "a-2"
        r = await c.post("/v1/completions", json={"model": "a"})
    assert r.status_code == 502 and "not retried, it may have been processed" in r.text
    assert reg.components["a"].retries == 1 and len(h.calls) == 3


async def test_no_copy_within_the_wait_is_a_503_and_the_request_is_withdrawn() -> None:
    stream = FakeStream(5.0, Accepted("a-x"))
    reg = Registry(a=FakeHandle(stream))
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "within 0.3 s" in r.text
    assert stream.cancelled


async def test_a_copy_silent_past_the_read_timeout_is_a_504() -> None:
    reg = Registry(a=FakeHandle(FakeStream(Accepted("a-x"), 5.0, JSON)))
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
    assert r.status_code == 504 and "copy a-x" in r.text


def test_scaled_to_zero_waits_for_the_first_copy_to_start() -> None:
    comp = RayComponent(ComponentSpec(name="z", max_wait_s=5, startup_health_check_timeout_s=90), None)
    assert not comp.serving  # not known before Ray Serve's details name it
    comp.view = DeploymentView(True, "HEALTHY", "", 0, ())
    assert comp.serving and comp.wait_timeout_s() == 90
    comp.view = DeploymentView(True, "UPSCALING", "", 1, (Replica("z-1", "STARTING", "", "", None, ""),))
    assert not comp.serving and comp.wait_timeout_s() == 5
