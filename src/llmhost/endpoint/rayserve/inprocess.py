"""Calling an ASGI app inside this process as an HTTP server would: a Ray replica runs the llmhost
server's app (`llmhost.server.create_app`) this way, so that a copy on Ray answers exactly as
`llmhost serve` does, without a second port or a second implementation.

No Ray here: what a copy sends back over a deployment handle is `Accepted`, then one `Head`, then the
body's chunks as the app sends them (a stream is never buffered).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Scope

ASGI = {"version": "3.0", "spec_version": "2.3"}


@dataclass(frozen=True)
class Accepted:
    """First item of every answer: a copy took the request (it was not only queued)."""

    copy: str


@dataclass(frozen=True)
class Head:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Call:
    """An HTTP request as a Ray deployment handle carries it."""

    method: str
    path: str
    query: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    client: tuple[str, int] = ("127.0.0.1", 0)


def _scope(call: Call, state: dict[str, Any]) -> Scope:
    return {
        "type": "http",
        "asgi": ASGI,
        "http_version": "1.1",
        "method": call.method,
        "scheme": "http",
        "path": call.path,
        "raw_path": call.path.encode(),
        "query_string": call.query.encode(),
        "root_path": "",
        "client": call.client,
        "server": ("127.0.0.1", 80),
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in call.headers],
        "state": dict(state),  # the app's lifespan state, as a server passes it to every request
    }


async def call_app(
    app: ASGIApp, call: Call, state: dict[str, Any] | None = None
) -> AsyncIterator[Head | bytes]:
    """The app's answer to `call`: its Head, then each non-empty body chunk. Closing the iterator early
    tells the app the client left (http.disconnect), as a server does."""
    messages: asyncio.Queue[Message | None] = asyncio.Queue()
    left = asyncio.Event()
    request: list[Message] = [{"type": "http.request", "body": call.body, "more_body": False}]

    async def receive() -> Message:
        if request:
            return request.pop()
        await left.wait()
        return {"type": "http.disconnect"}

    async def run() -> None:
        try:
            await app(_scope(call, state or {}), receive, messages.put)
        finally:
            messages.put_nowait(None)  # the app returned or raised

    task = asyncio.create_task(run(), name=f"asgi {call.method} {call.path}")
    complete = False
    try:
        while (message := await messages.get()) is not None:
            if message["type"] == "http.response.start":
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
                yield Head(int(message["status"]), headers)
            elif message["type"] == "http.response.body":
                if chunk := message.get("body", b""):
                    yield bytes(chunk)
                if not message.get("more_body", False):
                    complete = True
                    return
        await task  # ended without a whole response: its exception, if it raised one
        raise RuntimeError(f"{call.method} {call.path}: the app returned without a complete response")
    finally:
        left.set()
        if not complete and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class Lifespan:
    """The ASGI lifespan protocol, driven as a server drives it: startup, then shutdown."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._outbox: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": ASGI, "state": self.state}
        await self.app(scope, self._inbox.get, self._outbox.put)

    async def _next(self) -> Message:
        assert self._task is not None
        answer = asyncio.ensure_future(self._outbox.get())
        await asyncio.wait({answer, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            return answer.result()
        answer.cancel()
        self._task.result()  # raises what the app raised
        raise RuntimeError("the app's lifespan ended without answering")

    async def startup(self) -> None:
        self._task = asyncio.create_task(self._run(), name="asgi lifespan")
        await self._inbox.put({"type": "lifespan.startup"})
        message = await self._next()
        if message["type"] != "lifespan.startup.complete":
            # the app re-raises after saying so: collected here, not reported later by the task's finalizer
            with contextlib.suppress(Exception):
                await self._task
            raise RuntimeError(f"startup failed: {message.get('message', '')}")

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        await self._inbox.put({"type": "lifespan.shutdown"})
        message = await self._next()
        if message["type"] != "lifespan.shutdown.complete":
            raise RuntimeError(f"shutdown failed: {message.get('message', '')}")
