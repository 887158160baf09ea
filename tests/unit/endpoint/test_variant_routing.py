"""The router's way to a component's variants, with in-process fake copies (the real thing:
tests/integration/test_endpoint_variants.py): a shadow copy that fails, hangs or finds no room never
touches the primary's answer, and the comparison reads whole answers and streams."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import httpx

from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.variants import INVOKED_HEADER, Variant, VariantSet
from llmhost.endpoint.spec import ComponentSpec
from llmhost.store import ResolvedModel
from tests.unit.endpoint.test_router import Registry, app_for, client, component

PRIMARY, SHADOW = 1001, 2001


def front(tmp: Path, shadow_ports: list[int]) -> tuple[Component, Variant[Component]]:
    a, s = component("chat-a", [PRIMARY], tmp), component("chat-s", shadow_ports, tmp)
    for member in (a, s):
        member.variant_of = "chat"
    comp = Component(ComponentSpec(name="chat"), ResolvedModel(tmp / "model.gguf"))
    shadow = Variant("s", s, 1.0, 100.0)
    comp.variants = VariantSet("chat", [Variant("a", a, 1.0, None), shadow], random.Random(0))
    return comp, shadow


def completion(text: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"text": text}]})


async def settled(shadow: Variant[Component]) -> None:
    deadline = time.monotonic() + 5
    while shadow.stats.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert shadow.stats.in_flight == 0


BODY = {"model": "chat", "prompt": "x", "temperature": 0}


async def test_a_failing_shadow_is_counted_and_the_primary_answers(tmp_path: Path) -> None:
    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.port == SHADOW:
            raise httpx.RemoteProtocolError("Server disconnected", request=request)
        return completion("Paris")

    comp, shadow = front(tmp_path, [SHADOW])
    app, _ = app_for(Registry(comp), handle)
    async with client(app) as c:
        r = await c.post("/v1/completions", json=BODY)
        assert r.status_code == 200 and r.headers[INVOKED_HEADER] == "a"
        assert r.json()["choices"][0]["text"] == "Paris"
        await settled(shadow)
    s = shadow.stats
    assert (s.sent, s.answered, s.failed, s.compared) == (1, 0, 1, 0)
    assert shadow.component.requests[502] == 1 and shadow.component.in_flight == 0


async def test_a_hanging_shadow_never_delays_the_primary(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.port == SHADOW:
            await release.wait()
            return completion("Rome")
        return completion("Paris")

    comp, shadow = front(tmp_path, [SHADOW])
    app, proxy = app_for(Registry(comp), handle)
    async with client(app) as c:
        r = await asyncio.wait_for(c.post("/v1/completions", json=BODY), 2)
        assert r.json()["choices"][0]["text"] == "Paris" and shadow.stats.in_flight == 1
        release.set()
        await settled(shadow)
    s = shadow.stats
    assert (s.answered, s.compared, s.matched, s.dropped) == (1, 1, 0, 0)  # compared: it disagreed
    assert s.latency_s > 0
    await proxy.aclose()


async def test_a_shadow_without_room_drops_the_copy(tmp_path: Path) -> None:
    async def handle(request: httpx.Request) -> httpx.Response:
        return completion("Paris")

    comp, shadow = front(tmp_path, [])  # no ready copy
    app, _ = app_for(Registry(comp), handle)
    async with client(app) as c:
        assert (await c.post("/v1/completions", json=BODY)).status_code == 200
    comp, shadow = front(tmp_path, [SHADOW])
    shadow.component.in_flight = shadow.component.spec.concurrent_per_copy  # its one copy's sequences busy
    app, _ = app_for(Registry(comp), handle)
    async with client(app) as c:
        assert (await c.post("/v1/completions", json=BODY)).status_code == 200
    assert (shadow.stats.sent, shadow.stats.dropped) == (0, 1)


async def test_a_streamed_primary_is_accumulated_and_compared(tmp_path: Path) -> None:
    def sse(*pieces: str) -> bytes:
        events = [f"data: {json.dumps({'choices': [{'text': p}]})}\n\n" for p in pieces]
        return "".join([*events, "data: [DONE]\n\n"]).encode()

    async def handle(request: httpx.Request) -> httpx.Response:
        # the primary streams in pieces, the shadow in one: the texts are what is compared
        content = sse("Pa", "ris") if request.url.port == PRIMARY else sse("Paris")
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=httpx.ByteStream(content)
        )

    comp, shadow = front(tmp_path, [SHADOW])
    app, _ = app_for(Registry(comp), handle)
    async with client(app) as c:
        async with c.stream("POST", "/v1/completions", json={**BODY, "stream": True}) as r:
            assert r.headers[INVOKED_HEADER] == "a"
            assert b"ris" in await r.aread()
        await settled(shadow)
        sampled = {**BODY, "temperature": 0.8}  # not compared: sampling may differ by chance
        assert (await c.post("/v1/completions", json=sampled)).status_code == 200
        await settled(shadow)
    s = shadow.stats
    assert (s.sent, s.answered, s.compared, s.matched) == (2, 2, 1, 1)
