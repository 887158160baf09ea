"""What every API adapter needs: the engine, settings, metrics, the chat template."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from llmhost.engine import (
    AsyncEngine,
    EngineError,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    SamplingParams,
)
from llmhost.engine.loop import RequestStream
from llmhost.server.chat_template import ChatTemplate, ChatTemplateError
from llmhost.server.errors import APIError, from_engine, model_loading, unavailable
from llmhost.server.metrics import ServerMetrics
from llmhost.server.settings import ServerSettings

log = logging.getLogger("llmhost.server")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def sse(data: Any, prefix: str = "data: ") -> str:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"{prefix}{payload}\n\n"


class ServingContext:
    def __init__(self, engine: AsyncEngine, settings: ServerSettings, metrics: ServerMetrics) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self._chat_template: ChatTemplate | None = None
        self.started_at = int(time.time())

    # -- model -------------------------------------------------------------------------------------
    def require_ready(self) -> None:
        if not self.engine.ready:
            raise model_loading(self.engine.error or "the model is still loading")

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        self.require_ready()
        return self.engine.tokenize(text, add_special=add_special)

    def check_capacity(self) -> None:
        """429 now if the request would be refused anyway: asked before any expensive work."""
        self.require_ready()
        try:
            self.engine.check_capacity()
        except EngineError as exc:
            raise self._refused(exc) from exc

    async def prompt_tokens(self, text: str, add_special: bool = True) -> list[int]:
        """Capacity first, then tokenization on a worker thread (a long prompt takes milliseconds that
        the event loop spends serving other clients)."""
        self.check_capacity()
        return await asyncio.to_thread(self.tokenize, text, add_special)

    def check_tokens(self, tokens: list[int], field: str) -> list[int]:
        self.require_ready()
        n_vocab = self.engine.info.n_vocab
        for t in tokens:
            if not 0 <= t < n_vocab:
                raise APIError(
                    422,
                    f"token id {t} is outside the vocabulary [0, {n_vocab})",
                    field=field,
                    extra={"value": t, "limit": n_vocab - 1},
                )
        return tokens

    def chat_template(self) -> ChatTemplate:
        self.require_ready()
        if self._chat_template is None:
            info = self.engine.info
            source = self.settings.chat_template or info.chat_template
            if not source:
                raise APIError(
                    400,
                    "this model has no chat template (none in the GGUF, none given with --chat-template); "
                    "use /v1/completions or a TGI body, or start the server with --chat-template FILE",
                    field="messages",
                )
            self._chat_template = ChatTemplate(source, info.bos_token, info.eos_token)
        return self._chat_template

    async def chat_prompt_tokens(self, messages: list[dict[str, Any]]) -> list[int]:
        """Capacity first, then the template and the tokenizer on a worker thread."""
        self.check_capacity()
        return await asyncio.to_thread(self._render_and_tokenize, messages)

    def _render_and_tokenize(self, messages: list[dict[str, Any]]) -> list[int]:
        template = self.chat_template()
        try:
            text = template.render(messages)
        except ChatTemplateError as exc:
            raise APIError(400, str(exc), field="messages") from exc
        # templates usually write the BOS token themselves: don't add a second one
        has_bos = bool(template.bos_token) and text.startswith(template.bos_token)
        return self.tokenize(text, add_special=not has_bos)

    def remaining(self, n_prompt: int) -> int:
        return max(1, self.settings.engine.max_total_tokens - n_prompt)

    # -- requests ----------------------------------------------------------------------------------
    def submit(self, request_id: str, prompt: list[int], params: SamplingParams, api: str) -> RequestStream:
        self.require_ready()
        try:
            return self.engine.submit(GenerationRequest(request_id, prompt, params))
        except EngineError as exc:
            raise self._refused(exc) from exc

    def _refused(self, exc: EngineError) -> APIError:
        err = from_engine(exc)
        self.metrics.rejected.labels(reason=str(err.status)).inc()
        return err

    def finished(self, api: str, event: GenerationEvent) -> None:
        self.metrics.count(api, event.finish_reason.value if event.finish_reason else "unknown")

    async def collect(self, stream: RequestStream, request: Request) -> list[GenerationEvent]:
        """All events of a non-streamed request; a client that goes away aborts it."""
        collector = asyncio.ensure_future(stream.collect())
        watcher = asyncio.ensure_future(_wait_disconnect(request))
        try:
            done, _ = await asyncio.wait({collector, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if collector not in done:
            stream.abort()
            collector.cancel()
            raise APIError(499, "client disconnected", "client_closed")
        return collector.result()


def openai_error_event(message: str, type_: str = "server_error", code: int = 500) -> str:
    return sse({"error": {"message": message, "type": type_, "code": code}})


async def _guarded(content: AsyncIterator[str], on_error: Callable[[str], str]) -> AsyncIterator[str]:
    """An unexpected error while streaming ends the stream with an error event in the API's format
    (the status line is long gone), instead of a cut connection."""
    try:
        async for chunk in content:
            yield chunk
    except Exception as exc:
        log.exception("stream failed")
        yield on_error(f"internal server error while streaming ({type(exc).__name__})")


class EventStreamResponse(StreamingResponse):
    """SSE response that aborts its request however the response ends, also when the client left
    before the first chunk (Starlette then cancels the response without starting the body)."""

    def __init__(
        self,
        content: AsyncIterator[str],
        stream: RequestStream,
        on_error: Callable[[str], str] = openai_error_event,
    ) -> None:
        super().__init__(_guarded(content, on_error), media_type="text/event-stream")
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._stream.abort()


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def raise_if_failed(event: GenerationEvent) -> None:
    if event.finish_reason is FinishReason.TIMEOUT:
        raise unavailable(f"request timed out: {event.error}")
    if event.error is not None:
        raise APIError(500, f"generation failed: {event.error}", "server_error")


def build_params(**fields: Any) -> SamplingParams:
    """SamplingParams, with a value the engine refuses answered as a 422 naming its field."""
    try:
        return SamplingParams(**fields)
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        raise APIError(422, str(exc), field=name if name in fields else None) from exc
