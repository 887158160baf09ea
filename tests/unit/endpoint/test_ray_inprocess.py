"""Calling an ASGI app in-process as a Ray copy does (no Ray needed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, StreamingResponse

from llmhost.endpoint.rayserve.inprocess import Call, Head, Lifespan, call_app


def make_app(events: list[str]) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[dict[str, str]]:
        events.append("startup")
        yield {"model": "loaded"}
        events.append("shutdown")

    app = FastAPI(lifespan=lifespan)

    @app.post("/echo")
    async def echo(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse(
            {
                "got": body,
                "query": request.url.query,
                "state": request.state.model,
                "client": request.client.host if request.client else None,
                "header": request.headers.get("x-a"),
            },
            headers={"x-b": "2"},
        )

    @app.get("/stream")
    async def stream(request: Request) -> StreamingResponse:
        async def tokens() -> AsyncIterator[bytes]:
            try:
                for i in range(1000):
                    yield f"data: {i}\n\n".encode()
                    await asyncio.sleep(0.01)
            finally:
                events.append("stream closed")

        return StreamingResponse(tokens(), media_type="text/event-stream")

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    return app


async def test_a_request_answers_its_head_then_its_body_with_the_lifespan_state() -> None:
    events: list[str] = []
    app = make_app(events)
    life = Lifespan(app)
    await life.startup()
    call = Call(
        "POST",
        "/echo",
        "q=1",
        [("X-A", "1"), ("content-type", "application/json")],
        b'{"x": 1}',
        ("10.1.2.3", 5),
    )
    items = [i async for i in call_app(app, call, life.state)]
    head, body = items[0], b"".join(i for i in items[1:] if isinstance(i, bytes))
    assert isinstance(head, Head) and head.status == 200 and ("x-b", "2") in head.headers
    assert body == b'{"got":{"x":1},"query":"q=1","state":"loaded","client":"10.1.2.3","header":"1"}'
    await life.shutdown()
    assert events == ["startup", "shutdown"]


async def test_a_stream_comes_chunk_by_chunk_and_stops_when_the_reader_leaves() -> None:
    events: list[str] = []
    app = make_app(events)
    answer = call_app(app, Call("GET", "/stream"))
    head = await anext(answer)
    assert isinstance(head, Head) and head.status == 200
    assert [await anext(answer) for _ in range(3)] == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"]
    await answer.aclose()  # the client left: the app hears it and its stream ends
    for _ in range(100):
        if "stream closed" in events:
            break
        await asyncio.sleep(0.01)
    assert events == ["stream closed"]


async def test_an_app_error_is_its_own_500() -> None:
    items = [i async for i in call_app(make_app([]), Call("GET", "/boom"))]
    assert isinstance(items[0], Head) and items[0].status == 500


async def test_a_failed_startup_raises() -> None:
    @asynccontextmanager
    async def broken(_app: FastAPI) -> AsyncIterator[None]:
        raise RuntimeError("no model")
        yield

    with pytest.raises(RuntimeError, match="startup failed"):
        await Lifespan(FastAPI(lifespan=broken)).startup()
