"""The Ray ingress's relay over deployment handles, with fake handles (no Ray needed): the shared
routing decisions, what reached a copy and what did not, streams and their failures."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
from fastapi import FastAPI

from llmhost.endpoint.dataplane import routing
from llmhost.endpoint.dataplane.routing import COMPONENT_HEADER, COPY_HEADER
from llmhost.endpoint.rayserve.inprocess import Accepted, Call, Head
from llmhost.endpoint.rayserve.relay import RayComponent, RayRelay
from llmhost.endpoint.rayserve.status import DeploymentView, Replica
from llmhost.endpoint.spec import ComponentSpec
from llmhost.web.otel import OtlpTracer
from llmhost.web.traces import TraceMiddleware
from tests.otlpreceiver import otlp_receiver

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
    def __init__(self, *streams: FakeStream, then: Iterable[FakeStream] = ()) -> None:
        self.streams: Iterator[FakeStream] = itertools.chain(streams, then)
        self.calls: list[Call] = []
        self.times: list[float] = []

    def options(self, **_: Any) -> FakeHandle:
        return self

    @property
    def handle(self) -> FakeHandle:  # the copy's method is named `handle`
        return self

    def remote(self, call: Call) -> FakeStream:
        self.calls.append(call)
        self.times.append(time.monotonic())
        return next(self.streams)


class Registry:
    def __init__(self, max_wait_s: float = 0.3, **handles: FakeHandle) -> None:
        spec = {n: ComponentSpec(name=n, max_wait_s=max_wait_s) for n in handles}
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
    a_comp = reg.components["a"]
    assert a_comp.requests[200] == 1 and a_comp.in_flight == 0
    # timed for the console: arrival to last byte, of which the copy's part
    assert a_comp.timed == 1 and a_comp.latency_s >= a_comp.model_latency_s >= 0
    assert a_comp.no_capacity == 0 and a_comp.waiting == 0


async def test_a_stream_passes_through_and_a_cut_ends_with_an_error_event() -> None:
    died = RuntimeError("copy died\nmore")
    h = FakeHandle(
        FakeStream(Accepted("a-x"), SSE, b"data: 1\n\n", b"data: 2", died),
        FakeStream(Accepted("a-x"), SSE, b"data: 1\n\n", b"data: [DONE]\n\n"),
    )
    reg = Registry(a=h)
    async with client(reg) as c:
        cut = (await c.post("/v1/completions", json={"model": "a", "stream": True})).text
        whole = (await c.post("/v1/completions", json={"model": "a", "stream": True})).text
    assert cut.startswith('data: 1\n\ndata: 2\n\ndata: {"error"')  # the partial event closed first
    assert "failed mid-stream: RuntimeError: copy died" in cut and "more" not in cut
    assert whole == "data: 1\n\ndata: [DONE]\n\n"
    assert reg.components["a"].stream_errors == 1 and reg.components["a"].in_flight == 0
    assert reg.components["a"].timed == 2  # a stream is timed once it ends, cut or whole


async def test_a_request_no_copy_took_goes_to_another_one_that_reached_one_never_does() -> None:
    h = FakeHandle(
        FakeStream(ConnectionError("replica gone")),
        FakeStream(Accepted("a-2"), JSON, b"{}"),
        FakeStream(Accepted("a-2"), RuntimeError("died")),
    )
    reg = Registry(a=h)
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
        assert r.status_code == 200 and r.headers[COPY_HEADER] == "a-2"
        r = await c.post("/v1/completions", json={"model": "a"})
    assert r.status_code == 502 and "not retried, it may have been processed" in r.text
    assert reg.components["a"].retries == 1 and len(h.calls) == 3


async def test_a_request_no_copy_takes_is_tried_again_with_a_growing_pause_until_one_does() -> None:
    gone = [FakeStream(ConnectionError("replica gone")) for _ in range(3)]
    h = FakeHandle(*gone, FakeStream(Accepted("a-9"), JSON, b"{}"))
    reg = Registry(max_wait_s=10, a=h)
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
    assert r.status_code == 200 and r.headers[COPY_HEADER] == "a-9"
    assert reg.components["a"].retries == 3 and all(s.cancelled for s in gone)
    gaps = [b - a for a, b in itertools.pairwise(h.times)]
    # 0.05, 0.1, 0.2 s (asyncio may wake a timer up to a clock tick early)
    assert gaps[0] >= 0.04 and gaps[1] >= 0.09 and gaps[2] >= 0.19 and sum(gaps) < 5, gaps


async def test_no_copy_taking_it_within_the_wait_is_a_503_naming_the_last_failure() -> None:
    h = FakeHandle(then=(FakeStream(ConnectionError(f"replica {i} gone")) for i in itertools.count()))
    reg = Registry(max_wait_s=0.5, a=h)
    started = time.monotonic()
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
    took = time.monotonic() - started
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    message = r.json()["error"]["message"]
    assert f"within 0.5 s; last failure: ConnectionError: replica {len(h.calls) - 1} gone" in message
    assert 3 <= len(h.calls) <= 8 and reg.components["a"].retries == len(h.calls) - 1
    assert 0.3 <= took < 3, took  # the wait, not one try per pause-less attempt


async def test_what_a_copy_sends_is_type_checked() -> None:
    h = FakeHandle(
        FakeStream(JSON),
        FakeStream(Accepted("a-1"), b"no head"),
        FakeStream(Accepted("a-1"), JSON, {"not": "bytes"}),
        FakeStream(Accepted("a-1"), SSE, b"data: 1\n\n", {"not": "bytes"}),
    )
    reg = Registry(a=h)
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
        assert r.status_code == 502 and "answered Head before taking the request; not retried" in r.text
        assert len(h.calls) == 1  # whatever answered may have done something with it: not sent again
        r = await c.post("/v1/completions", json={"model": "a"})
        assert r.status_code == 502 and "expected the answer's head, got bytes" in r.text
        r = await c.post("/v1/completions", json={"model": "a"})
        assert r.status_code == 502 and "expected a chunk of the body, got dict" in r.text
        cut = (await c.post("/v1/completions", json={"model": "a", "stream": True})).text
    assert cut.startswith('data: 1\n\ndata: {"error"') and "expected a chunk of the body" in cut
    assert reg.components["a"].stream_errors == 1 and reg.components["a"].in_flight == 0


async def test_a_copy_failing_while_it_answers_is_a_502_naming_it() -> None:
    died = RuntimeError("OOM\nadvice")
    reg = Registry(a=FakeHandle(FakeStream(Accepted("a-1"), JSON, b'{"partial":', died)))
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
    assert r.status_code == 502
    assert r.json()["error"]["message"] == (
        "copy a-1 of inference component 'a' failed while answering: RuntimeError: OOM"
    )


async def test_no_copy_within_the_wait_is_a_503_and_the_request_is_withdrawn() -> None:
    stream = FakeStream(5.0, Accepted("a-x"))
    reg = Registry(a=FakeHandle(stream))
    async with client(reg) as c:
        r = await c.post("/v1/completions", json={"model": "a"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "within 0.3 s" in r.text
    assert stream.cancelled and "last failure" not in r.text
    a = reg.components["a"]
    assert a.no_capacity == 1 and a.waiting == 0 and a.timed == 0  # the console's NoCapacity failures


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


async def test_the_ingress_span_continues_the_callers_trace_and_parents_the_copys() -> None:
    """With a tracer (a real OTLP exporter, a real receiver): the copy gets the ingress span's context in
    place of the caller's, and that span is the caller's child."""
    h = FakeHandle(FakeStream(Accepted("a-2"), JSON, b"{}"))
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with otlp_receiver() as receiver:
        tracer = OtlpTracer(receiver.url, "llmhost-endpoint")
        app = FastAPI()
        app.include_router(routing.data_routes(Registry(a=h), RayRelay(read_timeout_s=1.0)))
        app.add_middleware(TraceMiddleware, tracer=tracer)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            parent = f"00-{caller_trace}-{caller_span}-01"
            r = await c.post("/v1/completions", json={"model": "a"}, headers={"traceparent": parent})
            assert r.status_code == 200
        tracer.shutdown()  # sends what is queued
        (span,) = receiver.spans()
    (call,) = h.calls
    _, trace_id, span_id, _ = dict(call.headers)["traceparent"].split("-")
    assert (trace_id, span_id) == (span.trace_id, span.span_id)
    assert (span.trace_id, span.parent_span_id) == (caller_trace, caller_span)
    assert span.name == "POST /v1/completions" and span.service == "llmhost-endpoint"
    assert span.attributes["llmhost.component"] == "a" and span.attributes["llmhost.copy"] == "a-2"
