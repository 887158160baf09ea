"""A non-streamed request whose client goes away, or whose handler is cancelled: its streams are aborted
and the gather collecting them leaves no "_GatheringFuture exception was never retrieved" behind."""

from __future__ import annotations

import asyncio
import gc
from typing import Any, cast

import pytest
from starlette.requests import Request

from llmhost.engine import RequestStream
from llmhost.server.serving.context import ServingContext
from llmhost.web.errors import APIError


class Stream:
    """A request's stream that never ends by itself."""

    def __init__(self) -> None:
        self.aborted = False

    async def collect(self) -> list[Any]:
        await asyncio.sleep(3600)
        return []

    def abort(self, reason: str = "client") -> None:
        self.aborted = True


def request(disconnect_after: float) -> Request:
    async def receive() -> dict[str, Any]:
        await asyncio.sleep(disconnect_after)
        return {"type": "http.disconnect"}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)


async def _run(cancel: bool) -> tuple[list[Stream], list[dict[str, Any]]]:
    unretrieved: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: unretrieved.append(context))
    streams = [Stream(), Stream()]
    as_streams = cast(list[RequestStream], streams)
    # collect_all uses nothing of the context itself
    ctx = cast(ServingContext, object())
    gone_after = 60 if cancel else 0.05
    task = asyncio.ensure_future(ServingContext.collect_all(ctx, as_streams, request(gone_after)))
    if cancel:
        await asyncio.sleep(0.05)
        task.cancel()
    ended = ""
    try:  # no `pytest.raises`: its traceback would keep the gather alive past the collection below
        await task
    except (APIError, asyncio.CancelledError) as exc:
        ended = type(exc).__name__
    assert ended == ("CancelledError" if cancel else "APIError")
    del task
    await asyncio.sleep(0.05)  # the gather's children finish their cancellation
    gc.collect()
    await asyncio.sleep(0)
    return streams, unretrieved


@pytest.mark.parametrize("cancel", [False, True], ids=["client-gone", "handler-cancelled"])
def test_streams_aborted_and_nothing_unretrieved(cancel: bool) -> None:
    streams, unretrieved = asyncio.run(_run(cancel))
    assert all(s.aborted for s in streams)
    assert unretrieved == [], [c.get("message") for c in unretrieved]
