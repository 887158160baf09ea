"""A request's events, carried from the engine thread to the event loop its reader runs on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable

from llmhost.engine.request import GenerationEvent


class RequestStream:
    """Events of one request, in order; closing it early aborts the request (`abort(request_id,
    reason)`, the engine's)."""

    def __init__(self, abort: Callable[[str, str], None], request_id: str) -> None:
        self.request_id = request_id
        self._abort = abort
        self._queue: asyncio.Queue[GenerationEvent] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._done = False
        # the tokens generated so far: those delivered, then the engine's count on the last event
        self.completion_tokens = 0

    def put(self, event: GenerationEvent) -> None:
        """Deliver an event from any thread; dropped if the event loop is gone (nobody to tell)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    def __aiter__(self) -> AsyncGenerator[GenerationEvent, None]:
        return self._iterate()

    async def _iterate(self) -> AsyncGenerator[GenerationEvent, None]:
        try:
            while True:
                event = await self._queue.get()
                self.completion_tokens += len(event.token_ids)
                if event.finished:
                    self.completion_tokens = event.completion_tokens
                    self._done = True
                yield event
                if self._done:
                    return
        finally:
            if not self._done:
                self.abort()

    def abort(self, reason: str = "client") -> None:
        if not self._done:
            self._done = True
            self._abort(self.request_id, reason)

    async def collect(self) -> list[GenerationEvent]:
        return [event async for event in self]
