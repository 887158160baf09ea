"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`): the request bodies.

Text, image, tool_use and tool_result blocks (an image inline as base64: a `url` source is a 400
naming it, never fetched); `cache_control` is accepted (on the request, blocks and tools)
and has no effect (llmhost's prefix cache reuses any shared prompt prefix by itself). Any other field is a 400
naming it (extra="forbid"), as on the OpenAI routes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field

from llmhost.engine.request import INT32_MAX
from llmhost.server.protocol.limits import MAX_STOP_CHARS, MAX_STOP_SEQUENCES
from llmhost.server.protocol.openai import Strict
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

BLOCK_TYPES = ("text", "image", "tool_use", "tool_result", "thinking")
ToolName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class CacheControl(Strict):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None


class Base64Source(Strict):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class UrlSource(Strict):
    """A remote image: refused with a 400 naming `source.url` (this server fetches nothing)."""

    type: Literal["url"]
    url: str


ImageSource = Annotated[Base64Source | UrlSource, Discriminator("type")]


class ImageBlock(Strict):
    type: Literal["image"]
    source: ImageSource
    cache_control: CacheControl | None = None


class ToolUseBlock(Strict):
    type: Literal["tool_use"]
    id: Annotated[str, Field(min_length=1)]
    name: ToolName
    input: JSONObject
    cache_control: CacheControl | None = None


class ToolResultBlock(Strict):
    type: Literal["tool_result"]
    tool_use_id: Annotated[str, Field(min_length=1)]
    content: str | list[TextBlock] = ""
    is_error: bool = False
    cache_control: CacheControl | None = None

    def text(self) -> str:
        body = self.content if isinstance(self.content, str) else "".join(b.text for b in self.content)
        # the template has no error flag: the model is told in words
        return f"Error: {body}" if self.is_error else body


class ThinkingBlock(Strict):
    """An earlier turn's thought, sent back as the answer gave it (the template keeps or drops it)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None
    cache_control: CacheControl | None = None


AnyBlock = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock
Block = Annotated[AnyBlock, Discriminator("type")]


class Message(Strict):
    role: Literal["user", "assistant"]
    content: str | list[Block]

    def blocks(self) -> list[AnyBlock]:
        if isinstance(self.content, str):
            return [TextBlock(type="text", text=self.content)]
        return list(self.content)


class Tool(Strict):
    type: Literal["custom"] | None = None  # Anthropic's server tools (bash, web search...) are not run here
    name: ToolName
    description: str | None = None
    input_schema: JSONObject
    cache_control: CacheControl | None = None


class ToolChoiceAuto(Strict):
    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(Strict):
    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(Strict):
    type: Literal["tool"]
    name: ToolName
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(Strict):
    type: Literal["none"]


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Discriminator("type")
]


class ThinkingEnabled(Strict):
    type: Literal["enabled"]
    budget_tokens: Annotated[int, Field(ge=1)]


class ThinkingDisabled(Strict):
    type: Literal["disabled"]


ThinkingConfig = Annotated[ThinkingEnabled | ThinkingDisabled, Discriminator("type")]


class Metadata(Strict):
    user_id: Annotated[str, Field(max_length=256)] | None = None


class CountTokensRequest(Strict):
    """What a prompt is made of: the fields `/v1/messages/count_tokens` takes."""

    model: str
    messages: Annotated[list[Message], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: Annotated[list[Tool], Field(max_length=128)] | None = None
    tool_choice: ToolChoice | None = None
    cache_control: CacheControl | None = None
    # a thinking model's thought: on with a budget of tokens, or off (left out: the model's default)
    thinking: ThinkingConfig | None = None

    def system_text(self) -> str | None:
        if self.system is None:
            return None
        return self.system if isinstance(self.system, str) else "".join(b.text for b in self.system)


class MessagesRequest(CountTokensRequest):
    max_tokens: Annotated[int, Field(ge=1)]
    stop_sequences: (
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]],
            Field(max_length=MAX_STOP_SEQUENCES),
        ]
        | None
    ) = None
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    metadata: Metadata | None = None
    stream: bool = False


def check_blocks(body: Any) -> None:
    """Content blocks llmhost cannot read are a 400 naming the block, before the body is validated
    (a pydantic union error would not say so)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return
    for i, message in enumerate(body["messages"]):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and kind not in BLOCK_TYPES:
                raise APIError(
                    400,
                    f"content blocks of type {kind!r} are not supported: llmhost reads "
                    f"{', '.join(BLOCK_TYPES)} blocks",
                    field=f"messages.{i}.content.{j}.type",
                )
