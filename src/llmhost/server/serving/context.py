"""What every API adapter needs: the engine, settings, metrics, the chat template."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from llmhost.engine import (
    AsyncEngine,
    Constraint,
    EngineError,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
)
from llmhost.engine.embedder_loop import AsyncEmbedder
from llmhost.engine.lora import AdapterSet
from llmhost.engine.media import MEDIA_MARKER, MediaError, MediaLimits, MediaSpan, kv_cells
from llmhost.engine.request import ParamError
from llmhost.engine.stream import RequestStream
from llmhost.server.errors import from_engine
from llmhost.server.limit_fields import COMPLETIONS, LimitFields
from llmhost.server.metrics import ServerMetrics
from llmhost.server.serving.adapters import AdapterChoice
from llmhost.server.serving.chat_template import (
    ChatTemplate,
    ChatTemplateBoundError,
    ChatTemplateError,
    TemplateMessage,
)
from llmhost.server.serving.media import ChatMedia
from llmhost.server.serving.model_names import ModelNames
from llmhost.server.serving.side_embedder import SideEmbedder
from llmhost.server.settings import ServerSettings
from llmhost.server.tracing import InferenceTracing, chat
from llmhost.shared.jsontext import compact
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError, error_body, model_loading, unavailable
from llmhost.web.quota import reserve_tokens

log = logging.getLogger("llmhost.server")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def sse(data: Any, prefix: str = "data: ") -> str:
    payload = data if isinstance(data, str) else compact(data)
    return f"{prefix}{payload}\n\n"


class ServingContext:
    def __init__(
        self,
        engine: AsyncEngine,
        settings: ServerSettings,
        metrics: ServerMetrics,
        embedder: AsyncEmbedder | None = None,
        side_embedder: SideEmbedder | None = None,
        tracing: InferenceTracing | None = None,
    ) -> None:
        """`embedder`: the --embeddings mode, where it holds the model and `engine` is never started;
        `side_embedder`: a generation server's embeddings context (none: --no-chat-embeddings);
        `tracing`: where the requests submitted are told (none: no traces)."""
        self.engine = engine
        self.tracing = tracing
        self.embedder = embedder
        self.side_embedder = side_embedder
        self.settings = settings
        self.metrics = metrics
        self._chat_template: ChatTemplate | None = None
        self.started_at = int(time.time())
        self.adapters = AdapterChoice(settings.engine.adapters)
        self.names = ModelNames(settings, self.adapters)

    # -- model -------------------------------------------------------------------------------------
    @property
    def model(self) -> AsyncEngine | AsyncEmbedder:
        """What holds the model (readiness, vocabulary, info): with --embeddings the embedder, else the
        engine."""
        return self.embedder if self.embedder is not None else self.engine

    async def embeddings_model(self) -> AsyncEmbedder | None:
        """What serves embeddings, ready: the --embeddings mode's embedder (a 503 while it loads), else
        the side embedder (loaded now if it is not yet); None where the server has neither."""
        if self.embedder is not None:
            self.require_model()
            return self.embedder
        return await self.side_embedder.ready() if self.side_embedder is not None else None

    def capabilities(self) -> list[str]:
        """What the model does here, as Ollama's /api/show names it: completion (generation), embedding
        (an embedder serves, the side one included), or rank (a reranker: scores, no embeddings)."""
        if self.embedder is None:
            return ["completion", "embedding"] if self.side_embedder is not None else ["completion"]
        ranks = (self.embedder.pooling if self.embedder.ready else self.embedder.config.pooling) == "rank"
        return ["rank"] if ranks else ["embedding"]

    def input_capabilities(self) -> list[str]:
        """What the model reads besides text, in Ollama's words: vision (images), audio."""
        if self.embedder is not None:
            return []
        names = {"image": "vision", "audio": "audio"}
        return [names[kind] for kind in self.engine.modalities]

    def require_model(self) -> None:
        if not self.model.ready:
            raise model_loading(self.model.error or "the model is still loading")

    def require_ready(self) -> None:
        """The generation engine is ready; with --embeddings there is none: a 400 saying so."""
        if self.embedder is not None:
            raise APIError(
                400,
                "this server was started with --embeddings: it serves /v1/embeddings (and /tokenize, "
                "/detokenize), not text generation; start it without --embeddings to generate",
            )
        self.require_model()

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        self.require_model()
        return self.model.tokenize(text, add_special=add_special)

    def marker_tokens(self, markers: tuple[str, ...]) -> frozenset[int]:
        """The tokens that are, each alone, one of `markers` (a marker the vocabulary spells in
        several tokens is plain text already)."""
        ids = (self.tokenize(m, add_special=False) for m in markers)
        return frozenset(t[0] for t in ids if len(t) == 1)

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
        self.require_model()
        n_vocab = self.model.info.n_vocab
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
            unread = [k for k in self.settings.template_kwargs() if not self._chat_template.uses(k)]
            if unread:  # the server's own setting: said once in its log, not refused per request
                log.warning("--chat-template-kwargs: the chat template does not read %s", ", ".join(unread))
        return self._chat_template

    async def chat_prompt(
        self,
        messages: list[TemplateMessage],
        tools: list[JSONObject] | None = None,
        kwargs: JSONObject | None = None,
        media: ChatMedia | None = None,
    ) -> tuple[str, list[int], tuple[MediaSpan, ...]]:
        """The rendered prompt (`kwargs`: more template variables), its tokens and the places of its
        `media` (whose markers it holds); capacity first."""
        self.check_capacity()
        chat(self.settings.model_name)
        text, tokens = await asyncio.to_thread(self._render_and_tokenize, messages, tools, kwargs, media)
        if not media:
            return text, tokens, ()
        has_bos = bool(self.chat_template().bos_token) and text.startswith(self.chat_template().bos_token)
        tokens, spans = await asyncio.to_thread(self._tokenize_media, text, media, not has_bos)
        return text, tokens, spans

    def check_media(self, media: ChatMedia) -> None:
        """A 400 naming the first medium where the model takes text only."""
        if media and not self.engine.modalities:
            raise APIError(
                400,
                "this model takes text only: the server was started without --mmproj (a projector for "
                "images or audio)",
                field=media.fields[0],
            )

    async def media_prompt(
        self, text: str, media: ChatMedia, field: str
    ) -> tuple[list[int], tuple[MediaSpan, ...]]:
        """A raw prompt's tokens with `media` at its markers (MEDIA_MARKER), in order (a BOS only where
        it has none); a marker count unlike the media's is a 400 naming `field`, the media's list."""
        self.check_capacity()
        self.check_media(media)
        if (markers := text.count(MEDIA_MARKER)) != len(media.inputs):
            raise APIError(
                400,
                f"the prompt holds {markers} media markers ({MEDIA_MARKER}) for {len(media.inputs)} media: "
                "each medium takes the place of one marker, in order",
                field=field,
            )
        bos = self.engine.info.bos_token
        add_special = not (bos and text.startswith(bos))
        return await asyncio.to_thread(self._tokenize_media, text, media, add_special)

    def media_limits(self) -> MediaLimits:
        s = self.settings
        return MediaLimits(s.max_image_pixels, s.max_audio_seconds)

    def _tokenize_media(
        self, text: str, media: ChatMedia, add_special: bool
    ) -> tuple[list[int], tuple[MediaSpan, ...]]:
        try:
            return self.engine.tokenize_media(text, media.inputs, self.media_limits(), add_special)
        except MediaError as exc:
            raise APIError(400, str(exc), field=media.fields[min(exc.index, len(media.fields) - 1)]) from exc

    async def count_chat_tokens(
        self,
        messages: list[TemplateMessage],
        tools: list[JSONObject] | None = None,
        kwargs: JSONObject | None = None,
        media: ChatMedia | None = None,
    ) -> int:
        """The prompt's length, `media` included, without generating (a count is no load: no capacity
        check)."""
        self.require_ready()
        text, tokens = await asyncio.to_thread(self._render_and_tokenize, messages, tools, kwargs, media)
        if not media:
            return len(tokens)
        has_bos = bool(self.chat_template().bos_token) and text.startswith(self.chat_template().bos_token)
        tokens, spans = await asyncio.to_thread(self._tokenize_media, text, media, not has_bos)
        return kv_cells(len(tokens), spans)  # every embedding, as usage counts them

    def _render_and_tokenize(
        self,
        messages: list[TemplateMessage],
        tools: list[JSONObject] | None,
        kwargs: JSONObject | None,
        media: ChatMedia | None = None,
    ) -> tuple[str, list[int]]:
        """The rendered prompt and its tokens (none where it holds `media`: the projector tokenizes it)."""
        template = self.chat_template()
        try:
            text = template.render(messages, tools=tools, kwargs=kwargs)
        except ChatTemplateBoundError as exc:  # the template's fault, not the messages'
            raise APIError(exc.status, str(exc), "server_error") from exc
        except ChatTemplateError as exc:
            raise APIError(exc.status, str(exc), field="messages") from exc
        # templates usually write the BOS token themselves: don't add a second one
        has_bos = bool(template.bos_token) and text.startswith(template.bos_token)
        if media:
            return text, []
        return text, self.tokenize(text, add_special=not has_bos)

    async def check_constraint(self, constraint: Constraint | None) -> None:
        """A grammar the engine cannot use is a 400 naming the construct (checked on a worker thread:
        the first check waits for the vocabulary index)."""
        if constraint is None:
            return
        self.require_ready()
        try:
            await asyncio.to_thread(self.engine.check_constraint, constraint)
        except InvalidRequestError as exc:
            raise APIError(400, str(exc), field=exc.field_name) from exc

    def remaining(self, n_prompt: int) -> int:
        return max(1, self.settings.engine.max_total_tokens - n_prompt)

    # -- requests ----------------------------------------------------------------------------------
    def submit(
        self,
        request_id: str,
        prompt: list[int],
        params: SamplingParams,
        fields: LimitFields,
        group: str = "",
        adapters: AdapterSet = (),
        priority: int = 0,
        media: tuple[MediaSpan, ...] = (),
    ) -> RequestStream:
        """`fields`: the request's token-limit fields in its API's words (a refusal over a limit names
        them); `adapters`: the LoRA adapters it runs with (`self.adapters` chooses them); `priority`: its
        admission order, lowest first."""
        self.require_ready()
        # the API key's tokens a minute, taken on the most this can use and settled on what it used
        reservation = reserve_tokens(len(prompt) + params.max_tokens)
        try:
            request = GenerationRequest(
                request_id, prompt, params, group=group, adapters=adapters, priority=priority, media=media
            )
            if self.tracing is not None:
                self.tracing.submitted(request)
            stream = self.engine.submit(request)
        except EngineError as exc:
            reservation.cancel()
            if self.tracing is not None:
                self.tracing.refused(request_id)
            raise self._refused(exc, fields) from exc
        reservation.measure(lambda: len(prompt) + stream.completion_tokens)
        return stream

    def submit_choices(
        self,
        request_id: str,
        prompts: list[list[int]],
        params: list[SamplingParams],
        n: int,
        fields: LimitFields,
        adapters: AdapterSet = (),
        priority: int = 0,
        media: tuple[MediaSpan, ...] = (),
    ) -> list[RequestStream]:
        """`n` choices per prompt, index prompt * n + choice; the choices of one prompt share its KV.
        All or nothing: if one is refused, those already queued are aborted."""
        streams: list[RequestStream] = []
        try:
            for p, (prompt, p_params) in enumerate(zip(prompts, params, strict=True)):
                for i in range(n):
                    seed = p_params.seed
                    choice = p_params if seed is None or i == 0 else replace(p_params, seed=seed + i)
                    group = f"{request_id}/{p}" if n > 1 else ""
                    rid = f"{request_id}/{p * n + i}"
                    streams.append(self.submit(rid, prompt, choice, fields, group, adapters, priority, media))
        except BaseException:
            for s in streams:
                s.abort()
            raise
        return streams

    def _refused(self, exc: EngineError, fields: LimitFields = COMPLETIONS) -> APIError:
        err = from_engine(exc, fields)
        self.metrics.rejected.labels(reason=str(err.status)).inc()
        return err

    def finished(self, api: str, event: GenerationEvent) -> None:
        self.metrics.count(api, event.finish_reason.value if event.finish_reason else "unknown")

    async def collect(self, stream: RequestStream, request: Request) -> list[GenerationEvent]:
        """All events of a non-streamed request; a client that goes away aborts it."""
        return (await self.collect_all([stream], request))[0]

    async def collect_all(
        self, streams: list[RequestStream], request: Request
    ) -> list[list[GenerationEvent]]:
        """All events of every stream of one request; a client that goes away aborts them all."""
        collector: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(*(s.collect() for s in streams))
        )
        watcher: asyncio.Future[Any] = asyncio.ensure_future(_wait_disconnect(request))
        try:
            await asyncio.wait([collector, watcher], return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this task is cancelled (a server stopping)
            watcher.cancel()
            gone = not collector.done()
            if gone:
                for s in streams:
                    s.abort()
                collector.cancel()
                # a cancelled gather ends holding a CancelledError that nobody awaits: read it, or asyncio
                # logs "_GatheringFuture exception was never retrieved"
                collector.add_done_callback(_retrieve)
        if gone:
            raise APIError(499, "client disconnected", "client_closed")
        return list(collector.result())


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def openai_error_event(message: str, type_: str = "server_error", code: int = 500) -> str:
    return sse(error_body(code, message, type_))


async def _guarded(
    content: AsyncIterator[str], on_error: Callable[[str], str], request_ids: str
) -> AsyncIterator[str]:
    """An unexpected error while streaming ends the stream with an error event in the API's format
    (the status line is long gone), instead of a cut connection."""
    try:
        async for chunk in content:
            yield chunk
    except Exception as exc:
        log.exception("request %s: stream failed", request_ids)
        yield on_error(f"internal server error while streaming ({type(exc).__name__})")


class EventStreamResponse(StreamingResponse):
    """SSE response that aborts its request however the response ends, also when the client left
    before the first chunk (Starlette then cancels the response without starting the body)."""

    def __init__(
        self,
        content: AsyncIterator[str],
        stream: RequestStream | list[RequestStream],
        on_error: Callable[[str], str] = openai_error_event,
        media_type: str = "text/event-stream",  # Ollama's streams are NDJSON
    ) -> None:
        self._streams = stream if isinstance(stream, list) else [stream]
        ids = ", ".join(s.request_id for s in self._streams)
        super().__init__(_guarded(content, on_error, ids), media_type=media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            for stream in self._streams:
                stream.abort()


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


async def merge(streams: list[RequestStream]) -> AsyncIterator[tuple[int, GenerationEvent]]:
    """The events of several streams as they come, with the index of their stream."""
    if len(streams) == 1:
        # the common case (n = 1) read directly: a pump task and a queue cost the event loop a task
        # switch and two queue operations per token, on the CPU llama.cpp's threads decode with
        async with contextlib.aclosing(aiter(streams[0])) as events:
            async for only in events:
                yield 0, only
        return
    queue: asyncio.Queue[tuple[int, GenerationEvent | None]] = asyncio.Queue()

    async def pump(i: int, stream: RequestStream) -> None:
        try:
            async for event in stream:
                await queue.put((i, event))
        finally:
            await queue.put((i, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        open_streams = len(streams)
        while open_streams:
            i, event = await queue.get()
            if event is None:
                open_streams -= 1
            else:
                yield i, event
    finally:
        for t in tasks:
            t.cancel()


def build_params(**fields: Any) -> SamplingParams:
    """SamplingParams, with a value the engine refuses answered as a 422 naming its field."""
    try:
        return SamplingParams(**fields)
    except ParamError as exc:
        raise APIError(
            exc.status, str(exc), field=exc.field_name if exc.field_name in fields else None
        ) from exc
    except ValueError as exc:
        raise APIError(422, str(exc)) from exc
