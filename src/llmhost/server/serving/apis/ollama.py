"""Ollama's /api/chat and /api/generate over the one chat path: a request is put in chat terms (same
template, tools, constraints and engine as /v1/chat/completions), the answer as Ollama's objects,
streamed as NDJSON (one JSON object a line) unless `stream: false`; the last object carries
`done_reason` and the timings in nanoseconds."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from llmhost.engine import Constraint, FinishReason, GenerationEvent
from llmhost.engine.media import MEDIA_MARKER, MediaSpan
from llmhost.engine.stream import RequestStream
from llmhost.server import limit_fields
from llmhost.server.protocol import ollama as proto
from llmhost.server.protocol.outputs import json_response
from llmhost.server.protocol.shapes import OllamaFunction, OllamaMessage, OllamaPiece, OllamaToolCall
from llmhost.server.serving import tools
from llmhost.server.serving.apis import ollama_params as op
from llmhost.server.serving.chat import ChatPlan, StreamedOutput, planned, read_message, render_chat
from llmhost.server.serving.context import EventStreamResponse, ServingContext, raise_if_failed
from llmhost.server.serving.media import given
from llmhost.server.serving.thinking import ThinkingAsk
from llmhost.shared.jsontext import compact
from llmhost.web.errors import APIError

API = "ollama"
NDJSON = "application/x-ndjson"


def created_at() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def line(obj: OllamaPiece | dict[str, str]) -> str:
    return compact(obj) + "\n"


def error_line(message: str) -> str:
    """An error after the stream began: Ollama's clients raise it from an `error` object."""
    return line({"error": message})


def done_reason(event: GenerationEvent) -> str:
    return "length" if event.finish_reason is FinishReason.LENGTH else "stop"


def add_stats(out: OllamaPiece, event: GenerationEvent, started_ns: int) -> None:
    """The final object's figures: counts, and durations in nanoseconds as measured by the engine
    (`load_duration` 0: the model was loaded before the request was accepted)."""
    t = event.timings
    out["done_reason"] = done_reason(event)
    out["total_duration"] = time.monotonic_ns() - started_ns
    out["load_duration"] = 0
    out["prompt_eval_count"] = event.prompt_tokens
    out["prompt_eval_duration"] = int((t.prompt_ms if t else 0.0) * 1e6)
    out["eval_count"] = event.completion_tokens
    out["eval_duration"] = int((t.predicted_ms if t else 0.0) * 1e6)


def tool_calls(calls: list[tools.ParsedCall]) -> list[OllamaToolCall] | None:
    """Ollama's tool calls (arguments as an object), or None if one's arguments are no JSON object."""
    out: list[OllamaToolCall] = []
    for i, call in enumerate(calls):
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        function: OllamaFunction = {"index": i, "name": call.name, "arguments": arguments}
        out.append({"id": f"call_{uuid.uuid4().hex[:8]}", "function": function})
    return out


@dataclass(slots=True)
class Run:
    """A request on its way: what it reads back and how it answers."""

    model: str
    chat: bool  # /api/chat (`message`) or /api/generate (`response`)
    plan: ChatPlan
    prompt: list[int]
    started_ns: int
    context: bool = False  # /api/generate through a template: the final object carries `context`
    media: tuple[MediaSpan, ...] = ()  # the places of its images in `prompt`
    output_ids: list[int] = field(default_factory=list)

    def piece(self, text: str, calls: list[OllamaToolCall] | None = None, thought: str = "") -> OllamaPiece:
        """An object of the answer: its text, tool calls and thought (`thinking`, as Ollama sends it)."""
        now = created_at()
        if self.chat:
            message: OllamaMessage = {"role": "assistant", "content": text}
            if thought:
                message["thinking"] = thought
            if calls:
                message["tool_calls"] = calls
            return {"model": self.model, "created_at": now, "message": message, "done": False}
        if thought:
            return {
                "model": self.model,
                "created_at": now,
                "response": text,
                "thinking": thought,
                "done": False,
            }
        return {"model": self.model, "created_at": now, "response": text, "done": False}

    def last(
        self, text: str, event: GenerationEvent, calls: list[OllamaToolCall] | None = None, thought: str = ""
    ) -> OllamaPiece:
        out = self.piece(text, calls, thought)
        out["done"] = True
        add_stats(out, event, self.started_ns)
        if self.context:
            out["context"] = self.prompt + self.output_ids
        return out

    def answer(self, piece: OllamaPiece) -> Response:
        """A whole answer (no `stream`), as the documented model of its route has it."""
        model = proto.ChatResponse if self.chat else proto.GenerateResponse
        return json_response(model.model_validate(piece))


def load_answer(model: str, chat: bool) -> Response:
    """A request with nothing to generate loads the model (here: it is loaded already)."""
    if chat:
        message: OllamaMessage = {"role": "assistant", "content": ""}
        return json_response(
            proto.ChatResponse(
                model=model, created_at=created_at(), message=message, done=True, done_reason="load"
            )
        )
    return json_response(
        proto.GenerateResponse(
            model=model, created_at=created_at(), response="", done=True, done_reason="load"
        )
    )


def check_keep_alive(value: proto.KeepAlive) -> None:
    """A single server keeps its model loaded: any keep_alive holds (the model stays at least that long)
    but 0, which asks to unload it now (an endpoint with models on demand does: its router takes the
    field)."""
    if proto.keep_alive_seconds(value) == 0:
        raise APIError(
            400,
            "keep_alive 0 asks to unload the model: a single llmhost serve keeps its model "
            "loaded (an endpoint with models on demand unloads it)",
            field="keep_alive",
        )


class OllamaServing:
    def __init__(self, ctx: ServingContext, tool_parser: str = "auto") -> None:
        self.ctx = ctx
        self.tool_parser = tool_parser

    @property
    def n_ctx(self) -> int:
        return self.ctx.settings.engine.max_total_tokens

    def _template_source(self) -> str | None:
        """The chat template this copy renders with, or None if the model has none."""
        self.ctx.require_ready()
        return self.ctx.settings.chat_template or self.ctx.engine.info.chat_template or None

    def _check(self, body: proto.ChatRequest | proto.GenerateRequest) -> ThinkingAsk:
        """The request's model and limits checked; what it asks of a thought."""
        self.ctx.names.check_ollama(body.model)
        thinks = op.supports_thinking(self._template_source() or "", self.ctx.settings.reasoning_format)
        ask = op.think_ask(body.think, body.model, thinks)
        op.check_context(body.options, self.n_ctx)
        check_keep_alive(body.keep_alive)
        return ask

    async def chat(self, body: proto.ChatRequest, request: Request) -> Response:
        started = time.monotonic_ns()
        ask = self._check(body)
        if not body.messages:
            return load_answer(body.model, chat=True)
        op.check_tools(body.tools, body.model, self.ctx.chat_template(), self.ctx.settings.tool_format)
        constraint = op.constraint(body.format)
        chat = op.chat_request(body)
        media = op.chat_media(body.messages, self.ctx.settings.max_media_bytes)
        plan, _, prompt, spans = await render_chat(
            self.ctx, chat, constraint, self.tool_parser, ask, given(media)
        )
        run = Run(body.model, True, plan, prompt, started, media=spans)
        return await self._generate(run, body, constraint, request)

    async def generate(self, body: proto.GenerateRequest, request: Request) -> Response:
        started = time.monotonic_ns()
        empty = not body.prompt and not body.context
        ask = self._check(body)
        if body.template:
            raise APIError(
                400,
                "template (a Go template) is not supported: llmhost renders the model's own chat "
                "template; send raw: true with a prompt you formatted yourself",
                field="template",
            )
        if body.suffix:
            raise APIError(400, "suffix (fill-in-the-middle) is not supported", field="suffix")
        if empty:
            return load_answer(body.model, chat=False)
        constraint = op.constraint(body.format)
        plan, prompt, spans, templated = await self._generate_prompt(body, constraint, ask)
        # a prompt with images is no `context` to continue: its images' places are no token ids
        run = Run(body.model, False, plan, prompt, started, context=templated and not spans, media=spans)
        return await self._generate(run, body, constraint, request)

    async def _generate_prompt(
        self, body: proto.GenerateRequest, constraint: Constraint | None, ask: ThinkingAsk
    ) -> tuple[ChatPlan, list[int], tuple[MediaSpan, ...], bool]:
        """The prompt of /api/generate and the places of its images: raw as given, or through the model's
        chat template (a model with none takes the prompt as is, as Ollama's default template
        `{{ .Prompt }}` does)."""
        media = op.generate_media(body.images, self.ctx.settings.max_media_bytes)
        prefix = self.ctx.check_tokens(list(body.context or []), "context")
        if media and prefix:
            # the spans' positions count from the prompt's start: a context before it would shift them
            raise APIError(
                400, "context cannot be continued with images: send the whole prompt", field="context"
            )
        source = self._template_source()
        if not body.raw and source is not None:
            plan, _, prompt, spans = await render_chat(
                self.ctx, op.generate_messages(body), constraint, self.tool_parser, ask, given(media)
            )
            return plan, prefix + prompt, spans, True
        if body.system and not body.raw:
            raise APIError(
                400,
                "system needs a chat template, and this model has none (start the server with "
                "--chat-template FILE, or put it in a raw prompt)",
                field="system",
            )
        await self.ctx.check_constraint(constraint)
        text = body.prompt or ""
        if media:  # a raw prompt places its images itself, with Ollama's [img] or libmtmd's marker
            tokens, spans = await self.ctx.media_prompt(
                text.replace(op.IMAGE_PLACE, MEDIA_MARKER), media, "images"
            )
            return ChatPlan("none", None), tokens, spans, not body.raw
        bos = self.ctx.engine.info.bos_token
        tokens = await self.ctx.prompt_tokens(text, add_special=not (bos and text.startswith(bos)))
        return ChatPlan("none", None), prefix + tokens, (), not body.raw

    async def _generate(
        self,
        run: Run,
        body: proto.ChatRequest | proto.GenerateRequest,
        constraint: Constraint | None,
        request: Request,
    ) -> Response:
        n_tokens = op.max_tokens(body.options, len(run.prompt), self.n_ctx)
        params = planned(self.ctx, run.plan, op.sampling(body.options, n_tokens, self.n_ctx, constraint))
        rid = f"ollama-{uuid.uuid4().hex}"
        adapters = self.ctx.adapters.by_model(body.model.removesuffix(":latest"))  # a LoRA adapter's name
        chat = isinstance(body, proto.ChatRequest)
        fields = limit_fields.OLLAMA_CHAT if chat else limit_fields.OLLAMA_GENERATE
        streams = self.ctx.submit_choices(rid, [run.prompt], [params], 1, fields, adapters, media=run.media)
        if body.stream:
            return EventStreamResponse(
                self._stream(run, streams[0]), streams, on_error=error_line, media_type=NDJSON
            )
        events = (await self.ctx.collect_all(streams, request))[0]
        last = events[-1]
        raise_if_failed(last)
        self.ctx.finished(API, last)
        run.output_ids = [t for e in events for t in e.token_ids]
        text = "".join(e.text for e in events)
        reply = read_message(run.plan, text)
        content, found = reply.content, tool_calls(reply.calls)
        if found is None:  # not calls after all: the answer is text
            content, found = reply.answer, None
        return run.answer(run.last(content or "", last, found or None, reply.reasoning or ""))

    async def _stream(self, run: Run, stream: RequestStream) -> AsyncIterator[str]:
        output = StreamedOutput(run.plan)
        answer, sent = "", 0  # the answer text read so far (after any thought), and how much went out
        async for event in stream:
            if event.error is not None:
                yield error_line(event.error)
                return
            run.output_ids += event.token_ids
            thought, text, calls = output.feed(event.text, event.finished)
            answer += output.answer_fed
            sent += len(text)
            found = tool_calls(calls) if event.finished else None
            if event.finished and calls and found is None:  # not calls after all: what was held back is text
                text = text + answer[sent:]
            if text or thought:
                yield line(run.piece(text, thought=thought))
            if not event.finished:
                continue
            self.ctx.finished(API, event)
            if found:
                yield line(run.piece("", found))
            yield line(run.last("", event))
