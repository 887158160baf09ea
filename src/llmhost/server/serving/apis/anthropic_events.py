"""Anthropic's streaming events, in their documented order: message_start, ping, per content block
content_block_start / content_block_delta* / content_block_stop, then message_delta and
message_stop; an error mid-stream is an `error` event."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeAlias

from llmhost.server.protocol.shapes import AnthropicUsage, ContentBlock, ThinkingBlock, ToolUseBlock
from llmhost.shared.jsontext import compact

# what an event carries: its type, a block's index, a block or delta, the message (start), usage
EventValue: TypeAlias = (
    str
    | int
    | ContentBlock
    | list[ContentBlock]
    | AnthropicUsage
    | dict[str, str]
    | dict[str, str | None]
    | dict[str, int]
    | dict[str, "EventValue"]
    | None
)


def event(name: str, data: dict[str, EventValue]) -> str:
    return f"event: {name}\ndata: {compact(data)}\n\n"


def error_body(message: str, type_: str = "api_error") -> dict[str, EventValue]:
    return {"type": "error", "error": {"type": type_, "message": message}}


THINKING_START: ThinkingBlock = {"type": "thinking", "thinking": "", "signature": ""}


def error_event(message: str, type_: str = "api_error") -> str:
    return event("error", error_body(message, type_))


class MessageEvents:
    """The events of one streamed message; a thought opens a thinking block, text a text block, each
    open until the other kind, a tool_use block or the message's end follows."""

    def __init__(self, message_id: str, model: str, input_tokens: int) -> None:
        self.message_id = message_id
        self.model = model
        self.input_tokens = input_tokens
        self.index = 0
        self.open: str | None = None  # the kind of the block open: "thinking", "text" or None

    def start(self) -> str:
        message: dict[str, EventValue] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        }
        return event("message_start", {"type": "message_start", "message": message}) + event(
            "ping", {"type": "ping"}
        )

    def thinking(self, piece: str) -> Iterator[str]:
        yield from self._delta("thinking", {"type": "thinking_delta", "thinking": piece}, piece)

    def text(self, piece: str) -> Iterator[str]:
        yield from self._delta("text", {"type": "text_delta", "text": piece}, piece)

    def _delta(self, kind: str, delta: dict[str, str | None], piece: str) -> Iterator[str]:
        if not piece:
            return
        if self.open != kind:
            yield from self._close()
            self.open = kind
            block: ContentBlock = {"type": "text", "text": ""} if kind == "text" else THINKING_START
            yield event(
                "content_block_start",
                {"type": "content_block_start", "index": self.index, "content_block": block},
            )
        yield event(
            "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}
        )

    def _close(self) -> Iterator[str]:
        if self.open is None:
            return
        if self.open == "thinking":  # llmhost signs nothing: the signature is empty
            signature = {"type": "signature_delta", "signature": ""}
            yield event(
                "content_block_delta",
                {"type": "content_block_delta", "index": self.index, "delta": signature},
            )
        self.open = None
        yield event("content_block_stop", {"type": "content_block_stop", "index": self.index})
        self.index += 1

    def tool_use(self, block: ToolUseBlock) -> Iterator[str]:
        yield from self._close()
        start: ToolUseBlock = {**block, "input": {}}
        yield event(
            "content_block_start",
            {"type": "content_block_start", "index": self.index, "content_block": start},
        )
        partial = compact(block["input"])
        delta = {"type": "input_json_delta", "partial_json": partial}
        yield event(
            "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}
        )
        yield event("content_block_stop", {"type": "content_block_stop", "index": self.index})
        self.index += 1

    def finish(
        self, uses: list[ToolUseBlock], stop_reason: str, stop_sequence: str | None, output_tokens: int
    ) -> Iterator[str]:
        yield from self._close()
        for block in uses:
            yield from self.tool_use(block)
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        yield event(
            "message_delta",
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}},
        )
        yield event("message_stop", {"type": "message_stop"})
