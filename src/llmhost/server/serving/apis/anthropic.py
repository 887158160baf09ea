"""Anthropic's Messages API over the chat serving layer: a request is put in OpenAI chat terms (same
template, tools, constraints and engine as /v1/chat/completions), the answer in Anthropic's blocks
and named SSE events."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response

from llmhost.engine import FinishReason, GenerationEvent
from llmhost.server import limit_fields
from llmhost.server.protocol import anthropic as proto
from llmhost.server.protocol.openai import (
    ChatCompletionRequest,
    ChatMessage,
    ContentPart,
    FunctionCall,
    FunctionDef,
    ImagePart,
    ImageUrl,
    NamedFunction,
    NamedToolChoice,
    TextPart,
    Tool,
    ToolCall,
)
from llmhost.server.protocol.outputs import AnthropicMessage, TokenCount, json_response
from llmhost.server.protocol.shapes import ContentBlock, ToolUseBlock
from llmhost.server.serving import thinking, tools
from llmhost.server.serving.apis.anthropic_events import MessageEvents, error_event
from llmhost.server.serving.chat import (
    ChatRun,
    StreamedOutput,
    read_message,
    start_chat,
    template_inputs,
    thinking_plan,
)
from llmhost.server.serving.context import EventStreamResponse, ServingContext, raise_if_failed
from llmhost.server.serving.media import ChatMedia, image_from_base64, image_from_url
from llmhost.server.serving.media_sources import MediaSources
from llmhost.web.errors import APIError

API = "messages"


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def _messages(body: proto.CountTokensRequest) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    system = body.system_text()
    if system is not None:
        out.append(ChatMessage(role="system", content=system))
    last = len(body.messages) - 1
    for i, m in enumerate(body.messages):
        blocks = m.blocks()
        text = "".join(b.text for b in blocks if isinstance(b, proto.TextBlock))
        thought = "".join(b.thinking for b in blocks if isinstance(b, proto.ThinkingBlock)) or None
        if m.role == "user":
            if thought is not None:
                raise APIError(
                    400, "thinking blocks belong in assistant messages", field=f"messages.{i}.content"
                )
            out += [
                ChatMessage(role="tool", tool_call_id=b.tool_use_id, content=b.text())
                for b in blocks
                if isinstance(b, proto.ToolResultBlock)
            ]
            parts = _user_parts(blocks)
            if parts is not None:
                out.append(ChatMessage(role="user", content=parts))
            elif text or not any(isinstance(b, proto.ToolResultBlock) for b in blocks):
                out.append(ChatMessage(role="user", content=text))
            continue
        if i == last:
            raise APIError(
                400,
                "a final assistant message (a prefill to continue) is not supported: end with a user message",
                field=f"messages.{i}",
            )
        if any(isinstance(b, proto.ToolResultBlock) for b in blocks):
            raise APIError(400, "tool_result blocks belong in user messages", field=f"messages.{i}.content")
        if any(isinstance(b, proto.ImageBlock) for b in blocks):
            raise APIError(400, "image blocks belong in user messages", field=f"messages.{i}.content")
        calls = [
            ToolCall(id=b.id, function=FunctionCall(name=b.name, arguments=json.dumps(b.input)))
            for b in blocks
            if isinstance(b, proto.ToolUseBlock)
        ]
        out.append(
            ChatMessage(
                role="assistant", content=text or None, tool_calls=calls or None, reasoning_content=thought
            )
        )
    return out


def _user_parts(blocks: list[proto.AnyBlock]) -> list[ContentPart] | None:
    """A user turn's text and images in their order (an image is the media marker where it stands), or
    None where it has no image (its text alone is the content)."""
    if not any(isinstance(b, proto.ImageBlock) for b in blocks):
        return None
    parts: list[ContentPart] = []
    for b in blocks:
        if isinstance(b, proto.TextBlock):
            parts.append(TextPart(type="text", text=b.text))
        elif isinstance(b, proto.ImageBlock):
            source = b.source  # its bytes travel in message_media's ChatMedia: the part places the marker
            url = source.url if isinstance(source, proto.UrlSource) else f"data:{source.media_type};base64,"
            parts.append(ImagePart(type="image_url", image_url=ImageUrl(url=url)))
    return parts


async def message_media(body: proto.CountTokensRequest, sources: MediaSources) -> ChatMedia:
    """The images of `body`, in prompt order, checked as the chat route checks its own (one set of limits
    and refusals) and named by their Messages fields."""
    media = ChatMedia([], [])
    for i, m in enumerate(body.messages):
        for j, b in enumerate(m.blocks()):
            if not isinstance(b, proto.ImageBlock):
                continue
            if isinstance(b.source, proto.UrlSource):
                field = f"messages.{i}.content.{j}.source.url"
                media.inputs.append(await image_from_url(b.source.url, field, sources))
            else:
                field = f"messages.{i}.content.{j}.source.data"
                media.inputs.append(image_from_base64(b.source.data, field, sources.max_bytes))
            media.fields.append(field)
    return media


ChatToolChoice = Literal["none", "auto", "required"] | NamedToolChoice | None


def _tool_choice(choice: proto.ToolChoice | None) -> tuple[ChatToolChoice, bool]:
    """OpenAI's tool_choice for Anthropic's, and whether calls may come in parallel."""
    if choice is None:
        return None, True
    if isinstance(choice, proto.ToolChoiceNone):
        return "none", True
    parallel = not choice.disable_parallel_tool_use
    if isinstance(choice, proto.ToolChoiceAny):
        return "required", parallel
    if isinstance(choice, proto.ToolChoiceTool):
        return NamedToolChoice(type="function", function=NamedFunction(name=choice.name)), parallel
    return "auto", parallel


def to_chat(body: proto.CountTokensRequest) -> ChatCompletionRequest:
    """The request in OpenAI chat terms; sampling fields only for a MessagesRequest."""
    choice, parallel = _tool_choice(body.tool_choice)
    chat_tools = [
        Tool(
            type="function",
            function=FunctionDef(name=t.name, description=t.description, parameters=t.input_schema),
        )
        for t in body.tools or []
    ]
    chat = ChatCompletionRequest(
        messages=_messages(body),
        tools=chat_tools or None,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        model=body.model,
    )
    if isinstance(body, proto.MessagesRequest):
        chat.max_tokens = body.max_tokens
        chat.temperature = body.temperature
        chat.top_p = 1.0 if body.top_p is None else body.top_p
        chat.top_k = body.top_k or 0
        chat.stop = body.stop_sequences
    return chat


def thinking_ask(body: proto.CountTokensRequest) -> thinking.ThinkingAsk:
    """`thinking` in the terms every chat API is put in (left out: the model's own default)."""
    config = body.thinking
    field, budget_field = "thinking", "thinking.budget_tokens"
    if config is None:
        return thinking.ThinkingAsk(field=field, budget_field=budget_field)
    if isinstance(config, proto.ThinkingDisabled):
        return thinking.ThinkingAsk(False, field=field, budget_field=budget_field)
    if isinstance(body, proto.MessagesRequest) and config.budget_tokens >= body.max_tokens:
        raise APIError(
            400,
            f"thinking.budget_tokens ({config.budget_tokens}) must be less than max_tokens "
            f"({body.max_tokens})",
            field=budget_field,
        )
    return thinking.ThinkingAsk(True, config.budget_tokens, field=field, budget_field=budget_field)


def stop_reason(event: GenerationEvent, called: bool) -> tuple[str, str | None]:
    """Anthropic's stop_reason (and stop_sequence) of a finished generation."""
    if called:
        return "tool_use", None
    if event.finish_reason is FinishReason.LENGTH:
        return "max_tokens", None
    if event.finish_reason is FinishReason.STOP and event.stop_sequence is not None:
        return "stop_sequence", event.stop_sequence
    return "end_turn", None


def tool_uses(calls: list[tools.ParsedCall]) -> list[ToolUseBlock] | None:
    """tool_use blocks, or None if a call's arguments are not a JSON object (then the output is text)."""
    blocks: list[ToolUseBlock] = []
    for call in calls:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        blocks.append(
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:24]}",
                "name": call.name,
                "input": arguments,
            }
        )
    return blocks


def renamed(exc: APIError) -> APIError:
    """An error naming a chat field, renamed to the Messages field it came from."""
    names = {"prompt": "messages", "stop": "stop_sequences"}
    if exc.field in names:
        exc.field = names[exc.field]
    return exc


class AnthropicServing:
    def __init__(self, ctx: ServingContext, tool_parser: str = "auto") -> None:
        self.ctx = ctx
        self.tool_parser = tool_parser

    async def messages(self, body: proto.MessagesRequest, request: Request) -> Response:
        rid = message_id()
        try:
            ask = thinking_ask(body)
            fields = limit_fields.MESSAGES
            chat, media = to_chat(body), partial(message_media, body)
            run = await start_chat(self.ctx, chat, None, rid, fields, self.tool_parser, ask, media)
        except APIError as exc:
            raise renamed(exc) from exc
        if body.stream:
            events = MessageEvents(rid, body.model, run.prompt_tokens)
            return EventStreamResponse(self._stream(run, events), run.streams, on_error=error_event)
        events_of = (await self.ctx.collect_all(run.streams, request))[0]
        last = events_of[-1]
        raise_if_failed(last)
        self.ctx.finished(API, last)
        return json_response(self._message(rid, body, run, events_of))

    def _message(
        self, rid: str, body: proto.MessagesRequest, run: ChatRun, events: list[GenerationEvent]
    ) -> AnthropicMessage:
        last = events[-1]
        reply = read_message(run.plan, "".join(e.text for e in events))
        content, uses = reply.content, tool_uses(reply.calls)
        if uses is None:  # not calls after all: the answer is text
            content, uses = reply.answer, []
        blocks: list[ContentBlock] = []
        if reply.reasoning is not None:
            blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": ""})
        if content:
            blocks.append({"type": "text", "text": content})
        reason, sequence = stop_reason(last, bool(uses))
        return AnthropicMessage(
            id=rid,
            type="message",
            role="assistant",
            model=body.model,
            content=[*blocks, *uses],
            stop_reason=reason,
            stop_sequence=sequence,
            usage={"input_tokens": last.prompt_tokens, "output_tokens": last.completion_tokens},
        )

    async def _stream(self, run: ChatRun, events: MessageEvents) -> AsyncIterator[str]:
        output = StreamedOutput(run.plan)
        answer, sent = "", 0
        yield events.start()
        async for event in run.streams[0]:
            if event.error is not None:
                timeout = event.finish_reason is FinishReason.TIMEOUT
                yield error_event(event.error, "timeout_error" if timeout else "api_error")
                return
            thought, text, calls = output.feed(event.text, event.finished)
            answer += output.answer_fed
            sent += len(text)
            uses = tool_uses(calls) if event.finished else []
            if uses is None:  # not calls after all: what was held back is text
                text, uses = text + answer[sent:], []
            for line in events.thinking(thought):
                yield line
            for line in events.text(text):
                yield line
            if event.finished:
                self.ctx.finished(API, event)
                reason, sequence = stop_reason(event, bool(uses))
                for line in events.finish(uses, reason, sequence, event.completion_tokens):
                    yield line

    async def count_tokens(self, body: proto.CountTokensRequest) -> TokenCount:
        self.ctx.names.check(body.model)
        chat = to_chat(body)
        try:
            tools.mode(chat)
            messages, offered, _ = template_inputs(self.ctx, chat)
            _, think = thinking_plan(self.ctx, chat, thinking_ask(body))
            media = await message_media(body, MediaSources.of(self.ctx.settings))
            self.ctx.check_media(media)
            n = await self.ctx.count_chat_tokens(messages, offered, think.kwargs, media)
        except APIError as exc:
            raise renamed(exc) from exc
        return TokenCount(input_tokens=n)
