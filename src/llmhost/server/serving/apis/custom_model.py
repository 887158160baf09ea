"""The model object inference.py's functions get: text in, text out, through the running engine, so
that their requests are batched with everyone else's.

User code is usually synchronous and runs on a worker thread: `generate` and `stream` submit to the
event loop from there and wait. Async user functions use `agenerate` and `astream`.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

from llmhost.engine import SamplingParams
from llmhost.server import limit_fields
from llmhost.server.serving.context import ServingContext, build_params, raise_if_failed

API = "custom"
# the request whose inference.py call this is: generations are named after it in logs and the engine
current_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("llmhost_custom_rid", default="")
_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)} - {"constraint"}


class CustomModel:
    """`generate(prompt, **sampling) -> str` and `stream(prompt, **sampling) -> Iterator[str]` (the text
    pieces as they come) from worker threads; `agenerate` / `astream` from async code. `sampling` takes
    the engine's SamplingParams fields (max_tokens, temperature, top_p, top_k, stop, seed, ...;
    `max_new_tokens` is read as max_tokens); unset, max_tokens is the server's TGI default and
    decoding is greedy."""

    def __init__(self, ctx: ServingContext, loop: asyncio.AbstractEventLoop) -> None:
        self._ctx = ctx
        self._loop = loop
        self._loop_thread = threading.get_ident()  # built on the loop's thread
        self._ids = itertools.count()

    @property
    def name(self) -> str:
        return self._ctx.settings.model_name

    def params(self, sampling: dict[str, Any]) -> SamplingParams:
        fields = dict(sampling)
        if "max_new_tokens" in fields:
            fields["max_tokens"] = fields.pop("max_new_tokens")
        unknown = sorted(set(fields) - _FIELDS)
        if unknown:
            raise TypeError(f"unknown sampling argument(s) {unknown}; known: {sorted(_FIELDS)}")
        fields.setdefault("max_tokens", self._ctx.settings.default_max_new_tokens)
        fields.setdefault("temperature", 0.0)
        return build_params(**fields)

    async def agenerate(self, prompt: str, **sampling: Any) -> str:
        return "".join([piece async for piece in self.astream(prompt, **sampling)])

    async def astream(self, prompt: str, **sampling: Any) -> AsyncGenerator[str, None]:
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        params = self.params(sampling)
        tokens = await self._ctx.prompt_tokens(prompt)
        rid = f"{current_request_id.get() or 'custom'}/{next(self._ids)}"
        stream = self._ctx.submit(rid, tokens, params, limit_fields.COMPLETIONS)
        try:
            async for event in stream:
                if event.finished:
                    self._ctx.finished(API, event)
                    raise_if_failed(event)
                if event.text:
                    yield event.text
        finally:
            stream.abort()  # a caller that stops reading early frees the sequence

    def generate(self, prompt: str, **sampling: Any) -> str:
        self._off_loop("generate", "agenerate")
        return asyncio.run_coroutine_threadsafe(self.agenerate(prompt, **sampling), self._loop).result()

    def stream(self, prompt: str, **sampling: Any) -> Iterator[str]:
        self._off_loop("stream", "astream")
        pieces = self.astream(prompt, **sampling)
        try:
            while (piece := asyncio.run_coroutine_threadsafe(_next(pieces), self._loop).result()) is not None:
                yield piece
        finally:
            closing = asyncio.run_coroutine_threadsafe(pieces.aclose(), self._loop)
            # an abandoned iterator may be collected on the loop's thread: waiting there would hang it
            if threading.get_ident() != self._loop_thread:
                closing.result()

    def _off_loop(self, call: str, instead: str) -> None:
        """A blocking call on the event loop's thread would wait for the loop it blocks."""
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError(f"model.{call}() blocks: in an async function use `await model.{instead}()`")


async def _next(pieces: AsyncIterator[str]) -> str | None:
    # None at the end: a future cannot carry StopAsyncIteration across threads cleanly
    try:
        return await pieces.__anext__()
    except StopAsyncIteration:
        return None
