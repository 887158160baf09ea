"""OpenAI's Responses API over the chat serving layer, stateless: a request is put in chat terms (same
template, tools, constraints and engine as /v1/chat/completions), the answer as output items.

Nothing is stored: `store: true` and `previous_response_id` are a 400 saying so (the client sends the
whole conversation, as with chat completions)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmhost.engine import Constraint, ConstraintKind, FinishReason, GenerationEvent
from llmhost.server import limit_fields
from llmhost.server.protocol import responses as proto
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
from llmhost.server.protocol.outputs import ResponseObject, json_response
from llmhost.server.protocol.shapes import OutputItem, ResponseEcho, ResponsesUsage, TokenLogprob
from llmhost.server.serving import thinking
from llmhost.server.serving.apis.responses_events import (
    ResponseEvents,
    ResponseShape,
    Status,
    call_item,
    item_id,
    message_item,
    reasoning_item,
    usage,
)
from llmhost.server.serving.chat import ChatRun, StreamedOutput, logprob_entries, read_message, start_chat
from llmhost.server.serving.context import EventStreamResponse, ServingContext, raise_if_failed
from llmhost.server.serving.media import ChatMedia, image_from_url
from llmhost.server.serving.media_sources import MediaSources
from llmhost.server.serving.structured import schema_constraint
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

API = "responses"
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _messages(body: proto.ResponsesRequest) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    if body.instructions is not None:
        out.append(ChatMessage(role="system", content=body.instructions))
    if isinstance(body.input, str):
        return [*out, ChatMessage(role="user", content=body.input)]
    thought: str | None = None  # a reasoning item's text, for the assistant turn that follows it
    for i, item in enumerate(body.input):
        if isinstance(item, proto.ReasoningItem):
            thought = (thought or "") + item.text()
            continue
        if thought is not None and not _answers(item):
            raise APIError(
                400,
                "a reasoning item must be followed by the assistant message or function call it led to",
                field=f"input.{i}",
            )
        if isinstance(item, proto.MessageItem):
            out.append(
                ChatMessage(
                    role=ROLES[item.role],  # type: ignore[arg-type]
                    content=_parts(item) if item.has_image() else item.text(),
                    reasoning_content=thought,
                )
            )
        elif isinstance(item, proto.FunctionCallOutputItem):
            out.append(ChatMessage(role="tool", tool_call_id=item.call_id, content=item.output))
        else:
            function = FunctionCall(name=item.name, arguments=item.arguments)
            call = ToolCall(id=item.call_id, function=function)
            previous = out[-1] if out else None
            if thought is None and previous is not None and previous.role == "assistant":
                previous.tool_calls = [*(previous.tool_calls or []), call]  # calls of one turn: one message
            else:
                out.append(
                    ChatMessage(role="assistant", content=None, tool_calls=[call], reasoning_content=thought)
                )
        thought = None
    if thought is not None:
        raise APIError(
            400,
            "a reasoning item must be followed by the assistant message or function call it led to",
            field=f"input.{len(body.input) - 1}",
        )
    return out


def _parts(item: proto.MessageItem) -> list[ContentPart]:
    """A message's text and images in their order (an image is the media marker where it stands; its
    bytes travel in input_media's ChatMedia)."""
    parts: list[ContentPart] = []
    for p in [] if isinstance(item.content, str) else item.content:
        if isinstance(p, proto.TextPart):
            parts.append(TextPart(type="text", text=p.text))
        else:
            parts.append(ImagePart(type="image_url", image_url=ImageUrl(url=p.image_url or "")))
    return parts


async def input_media(body: proto.ResponsesRequest, sources: MediaSources) -> ChatMedia:
    """The images of `body`'s input, in prompt order, checked as the chat route checks its own (one set
    of limits and refusals) and named by their Responses fields."""
    media = ChatMedia([], [])
    for i, item in enumerate(body.input if isinstance(body.input, list) else []):
        if not isinstance(item, proto.MessageItem) or isinstance(item.content, str):
            continue
        for j, part in enumerate(item.content):
            if not isinstance(part, proto.ImagePart):
                continue
            field = f"input.{i}.content.{j}"
            if part.file_id is not None:
                raise APIError(
                    400,
                    "file_id images are not supported: llmhost keeps no files; send the image inline "
                    "as a data: URI in image_url",
                    field=f"{field}.file_id",
                )
            if part.image_url is None:
                raise APIError(
                    400, "an input_image needs an image_url (a data: URI)", field=f"{field}.image_url"
                )
            media.inputs.append(await image_from_url(part.image_url, f"{field}.image_url", sources))
            media.fields.append(f"{field}.image_url")
    return media


def _answers(item: proto.Item) -> bool:
    """The item is an assistant turn (what an earlier thought led to)."""
    return isinstance(item, proto.FunctionCallItem) or (
        isinstance(item, proto.MessageItem) and item.role == "assistant"
    )


def thinking_ask(body: proto.ResponsesRequest) -> thinking.ThinkingAsk:
    effort = body.reasoning.effort if body.reasoning else None
    return thinking.from_effort(effort, body.reasoning_budget, "reasoning.effort")


def _constraint(body: proto.ResponsesRequest) -> Constraint | None:
    fmt = body.text.format if body.text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return Constraint(ConstraintKind.JSON_OBJECT, "", "text.format")
    if not fmt.schema_:
        raise APIError(400, "text.format of type json_schema needs a schema", field="text.format.schema")
    return schema_constraint(fmt.schema_, "text.format")


def to_chat(body: proto.ResponsesRequest) -> ChatCompletionRequest:
    if body.store:
        raise APIError(
            400,
            "store: true is not supported: llmhost keeps no responses (send store: false "
            "or leave it out, and send the whole conversation as input)",
            field="store",
        )
    if body.previous_response_id is not None:
        raise APIError(
            400,
            "previous_response_id is not supported: llmhost keeps no responses; send "
            "the whole conversation as input",
            field="previous_response_id",
        )
    choice: Any = body.tool_choice
    if isinstance(choice, proto.FunctionChoice):
        choice = NamedToolChoice(type="function", function=NamedFunction(name=choice.name))
    chat_tools = [
        Tool(
            type="function",
            function=FunctionDef(
                name=t.name, description=t.description, parameters=t.parameters, strict=t.strict
            ),
        )
        for t in body.tools or []
    ]
    return ChatCompletionRequest(
        model=body.model,
        messages=_messages(body),
        max_tokens=body.max_output_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        tools=chat_tools or None,
        tool_choice=choice,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        logprobs=body.wants_logprobs(),
        top_logprobs=body.top_logprobs,
        priority=body.priority,
    )


def renamed(exc: APIError) -> APIError:
    names = {
        "max_tokens": "max_output_tokens",
        "prompt": "input",
        "messages": "input",
        "response_format": "text.format",
    }
    if exc.field in names:
        exc.field = names[exc.field]
    return exc


def _echo(body: proto.ResponsesRequest, model: str) -> ResponseEcho:
    """The request's settings as the response object repeats them."""
    fmt: JSONObject = {"type": "text"}
    if body.text and body.text.format:
        fmt = body.text.format.model_dump(by_alias=True, exclude_none=True)
    choice = body.tool_choice
    return {
        "model": body.model or model,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "store": False,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "text": {"format": fmt},
        "tool_choice": choice.model_dump() if isinstance(choice, proto.FunctionChoice) else choice or "auto",
        "tools": [t.model_dump() for t in body.tools or []],
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "truncation": "disabled",
        "user": body.user,
    }


def _usage(last: GenerationEvent) -> ResponsesUsage:
    cached = last.timings.cache_n if last.timings else 0
    return usage(last.prompt_tokens, last.completion_tokens, cached, last.reasoning_tokens)


class ResponsesServing:
    def __init__(self, ctx: ServingContext, tool_parser: str = "auto") -> None:
        self.ctx = ctx
        self.tool_parser = tool_parser

    async def create(self, body: proto.ResponsesRequest, request: Request) -> Response:
        rid = item_id("resp")
        try:
            run = await start_chat(
                self.ctx,
                to_chat(body),
                _constraint(body),
                rid,
                limit_fields.RESPONSES,
                self.tool_parser,
                thinking_ask(body),
                partial(input_media, body),
            )
        except APIError as exc:
            raise renamed(exc) from exc
        shape = ResponseShape(rid, _echo(body, self.ctx.settings.model_name))
        if body.stream:
            events = ResponseEvents(shape)
            return EventStreamResponse(self._stream(run, events), run.streams, on_error=events.error)
        result = (await self.ctx.collect_all(run.streams, request))[0]
        last = result[-1]
        raise_if_failed(last)
        self.ctx.finished(API, last)
        reply = read_message(run.plan, "".join(e.text for e in result))
        content, calls = reply.content, reply.calls
        incomplete = last.finish_reason is FinishReason.LENGTH and not calls
        status: Status = "incomplete" if incomplete else "completed"
        output: list[OutputItem] = []
        if reply.reasoning is not None:
            output.append(reasoning_item(item_id("rs"), reply.reasoning))
        message = message_item(item_id("msg"), content or "", status, self._logprobs(body, result))
        output += [message] if content or not calls else []
        output += [call_item(c) for c in calls]
        reason = "max_output_tokens" if incomplete else None
        answer = shape.object(status, output, _usage(last), reason)
        return json_response(ResponseObject.model_validate(answer))  # checked against what is documented

    def _logprobs(self, body: proto.ResponsesRequest, events: list[GenerationEvent]) -> list[TokenLogprob]:
        if not body.wants_logprobs():
            return []
        return logprob_entries(self.ctx.engine.token_text, [lp for e in events for lp in e.logprobs])

    async def _stream(self, run: ChatRun, events: ResponseEvents) -> AsyncIterator[str]:
        output = StreamedOutput(run.plan)
        for line in events.start():
            yield line
        async for event in run.streams[0]:
            if event.error is not None:
                timeout = event.finish_reason is FinishReason.TIMEOUT
                yield events.failed(event.error, "timeout" if timeout else "server_error")
                return
            thought, text, calls = output.feed(event.text, event.finished)
            for line in events.reasoning(thought):
                yield line
            if event.logprobs:
                events.add_logprobs(logprob_entries(self.ctx.engine.token_text, event.logprobs))
            for line in events.text(text):
                yield line
            if event.finished:
                self.ctx.finished(API, event)
                incomplete = event.finish_reason is FinishReason.LENGTH
                for line in events.finish(calls, incomplete, _usage(event)):
                    yield line
