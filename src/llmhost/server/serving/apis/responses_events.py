"""The Responses API's output: the response object, its output items, and its streaming events in the
documented order, each with a `sequence_number`:

response.created, response.in_progress; for a thinking model's thought, a reasoning item first:
response.output_item.added, response.content_part.added, response.reasoning_text.delta*,
response.reasoning_text.done, response.content_part.done, response.output_item.done; per message
item response.output_item.added, response.content_part.added, response.output_text.delta*,
response.output_text.done, response.content_part.done, response.output_item.done; per function call
response.output_item.added,
response.function_call_arguments.delta, response.function_call_arguments.done,
response.output_item.done; then response.completed (or response.incomplete when cut by
max_output_tokens, response.failed when generation failed; `error` for an unexpected failure).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Literal, TypeAlias

from llmhost.server.protocol import shapes
from llmhost.server.protocol.shapes import ResponseBody, ResponseEcho, TokenLogprob
from llmhost.server.serving.tools import ParsedCall
from llmhost.shared.jsontext import compact

Status = Literal["completed", "incomplete", "failed", "in_progress"]
# what an event carries besides its type and number: ids and indexes, text, an item or part, logprobs,
# the response object (dumped)
EventValue: TypeAlias = (
    str
    | int
    | list[TokenLogprob]
    | shapes.OutputItem
    | shapes.OutputText
    | shapes.ReasoningText
    | ResponseBody
    | None
)


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def text_part(text: str, logprobs: list[TokenLogprob] | None = None) -> shapes.OutputText:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_item(
    mid: str, text: str, status: str, logprobs: list[TokenLogprob] | None = None
) -> shapes.MessageItem:
    content = [text_part(text, logprobs)] if status != "in_progress" else []
    return {"id": mid, "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_part(text: str) -> shapes.ReasoningText:
    return {"type": "reasoning_text", "text": text}


def reasoning_item(rid: str, text: str, status: str = "completed") -> shapes.ReasoningItem:
    """A thought, whole (no summary is written: `summary` stays empty)."""
    content = [reasoning_part(text)] if status != "in_progress" else []
    return {"id": rid, "type": "reasoning", "summary": [], "content": content, "status": status}


def call_item(call: ParsedCall, status: str = "completed") -> shapes.FunctionCallItem:
    return {
        "id": item_id("fc"),
        "type": "function_call",
        "status": status,
        "call_id": item_id("call"),
        "name": call.name,
        "arguments": call.arguments,
    }


def usage(prompt: int, completion: int, cached: int, reasoning: int = 0) -> shapes.ResponsesUsage:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


class ResponseShape:
    """The response object's fields that echo the request, shared by every snapshot of it."""

    def __init__(self, rid: str, echo: ResponseEcho) -> None:
        self.rid = rid
        self.echo = echo
        self.created_at = int(time.time())

    def object(
        self,
        status: Status,
        output: list[shapes.OutputItem],
        use: shapes.ResponsesUsage | None = None,
        incomplete: str | None = None,
        error: shapes.ResponseError | None = None,
    ) -> ResponseBody:
        """A snapshot: a plain dict, written into events as it is (the whole answer is checked against
        ResponseObject by the caller)."""
        return {
            "id": self.rid,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            **self.echo,
            "output": output,
            "usage": use,
        }


def sse(name: str, data: dict[str, EventValue]) -> str:
    return f"event: {name}\ndata: {compact(data)}\n\n"


class ResponseEvents:
    """The events of one streamed response. A thought opens a reasoning item, text a message item
    after it; function calls follow as their own items."""

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self.seq = 0
        self.output: list[shapes.OutputItem] = []
        self.message_id = item_id("msg")
        self.text_so_far: str | None = None  # None until the message item is open
        self.reasoning_id = item_id("rs")
        self.thought: str | None = None  # None until the reasoning item is open; closed: in `output`
        # with include ["message.output_text.logprobs"]: those of the tokens not sent yet, and all
        self.pending_logprobs: list[TokenLogprob] = []
        self.logprobs: list[TokenLogprob] = []

    def add_logprobs(self, entries: list[TokenLogprob]) -> None:
        """Token logprobs, sent with the next text delta (text held back while it may be a tool call
        keeps its tokens' logprobs until it goes out)."""
        self.pending_logprobs += entries
        self.logprobs += entries

    def _event(self, kind: str, /, **fields: EventValue) -> str:
        data: dict[str, EventValue] = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(kind, data)

    def start(self) -> Iterator[str]:
        snapshot = self.shape.object("in_progress", [])
        yield self._event("response.created", response=snapshot)
        yield self._event("response.in_progress", response=snapshot)

    def _where(self) -> dict[str, EventValue]:
        return {"item_id": self.message_id, "output_index": len(self.output), "content_index": 0}

    def _thought_where(self) -> dict[str, EventValue]:
        return {"item_id": self.reasoning_id, "output_index": 0, "content_index": 0}

    def reasoning(self, piece: str) -> Iterator[str]:
        if not piece:
            return
        if self.thought is None:
            self.thought = ""
            yield self._event(
                "response.output_item.added",
                output_index=0,
                item=reasoning_item(self.reasoning_id, "", "in_progress"),
            )
            yield self._event("response.content_part.added", **self._thought_where(), part=reasoning_part(""))
        self.thought += piece
        yield self._event("response.reasoning_text.delta", **self._thought_where(), delta=piece)

    def _close_reasoning(self) -> Iterator[str]:
        if self.thought is None or self.output:
            return
        text = self.thought
        yield self._event("response.reasoning_text.done", **self._thought_where(), text=text)
        yield self._event("response.content_part.done", **self._thought_where(), part=reasoning_part(text))
        item = reasoning_item(self.reasoning_id, text)
        self.output.append(item)
        yield self._event("response.output_item.done", output_index=0, item=item)

    def _open_message(self) -> Iterator[str]:
        yield from self._close_reasoning()
        self.text_so_far = ""
        yield self._event(
            "response.output_item.added",
            output_index=len(self.output),
            item=message_item(self.message_id, "", "in_progress"),
        )
        yield self._event("response.content_part.added", **self._where(), part=text_part(""))

    def text(self, piece: str) -> Iterator[str]:
        if not piece:
            return
        if self.text_so_far is None:
            yield from self._open_message()
        self.text_so_far = (self.text_so_far or "") + piece
        sent, self.pending_logprobs = self.pending_logprobs, []
        yield self._event("response.output_text.delta", **self._where(), delta=piece, logprobs=sent)

    def _close_message(self, status: Status) -> Iterator[str]:
        if self.text_so_far is None:
            return
        text = self.text_so_far
        yield self._event("response.output_text.done", **self._where(), text=text, logprobs=self.logprobs)
        yield self._event("response.content_part.done", **self._where(), part=text_part(text, self.logprobs))
        item = message_item(self.message_id, text, status, self.logprobs)
        index = len(self.output)
        self.output.append(item)
        yield self._event("response.output_item.done", output_index=index, item=item)

    def call(self, call: ParsedCall) -> Iterator[str]:
        index = len(self.output)
        item = call_item(call)
        yield self._event(
            "response.output_item.added",
            output_index=index,
            item={**item, "status": "in_progress", "arguments": ""},
        )
        where: dict[str, EventValue] = {"item_id": item["id"], "output_index": index}
        yield self._event("response.function_call_arguments.delta", **where, delta=call.arguments)
        yield self._event(
            "response.function_call_arguments.done", **where, name=call.name, arguments=call.arguments
        )
        self.output.append(item)
        yield self._event("response.output_item.done", output_index=index, item=item)

    def finish(self, calls: list[ParsedCall], incomplete: bool, use: shapes.ResponsesUsage) -> Iterator[str]:
        if self.text_so_far is None and not calls:  # an empty answer is still one (empty) message
            yield from self._open_message()
        yield from self._close_reasoning()
        status: Status = "incomplete" if incomplete and not calls else "completed"
        yield from self._close_message(status)
        for call in calls:
            yield from self.call(call)
        reason = "max_output_tokens" if status == "incomplete" else None
        final = self.shape.object(status, self.output, use, reason)
        yield self._event(f"response.{status}", response=final)

    def failed(self, message: str, code: str = "server_error") -> str:
        error: shapes.ResponseError = {"code": code, "message": message}
        snapshot = self.shape.object("failed", self.output, error=error)
        return self._event("response.failed", response=snapshot)

    def error(self, message: str) -> str:
        """An unexpected failure while streaming (EventStreamResponse's on_error)."""
        return self._event("error", code="server_error", message=message, param=None)
