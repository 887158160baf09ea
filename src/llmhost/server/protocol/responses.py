"""OpenAI's Responses API (`POST /v1/responses`), stateless: the request body.

Input items: messages (text parts, and images as `data:` URIs: a file_id or a remote URL is a 400
naming it, never fetched), `function_call` and `function_call_output`. Any other field or
item type is a 400 naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from llmhost.engine.request import INT32_MAX, MAX_LOGPROBS
from llmhost.server.protocol.openai import Strict, no_parameters
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")
PART_TYPES = ("input_text", "input_image", "output_text", "reasoning_text")
ItemId = Annotated[str, Field(max_length=256)]


class TextPart(Strict):
    type: Literal["input_text", "output_text"]
    text: str
    # what an earlier response's output_text carries, sent back as is by clients that replay output
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class ImagePart(Strict):
    """An image: `image_url` a `data:` URI (a remote URL or a `file_id` is a 400 naming it)."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto"] = "auto"  # the projector has one resolution: all are one


Part = Annotated[TextPart | ImagePart, Discriminator("type")]


class MessageItem(Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]
    id: ItemId | None = None
    status: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    def has_image(self) -> bool:
        return not isinstance(self.content, str) and any(isinstance(p, ImagePart) for p in self.content)


class FunctionCallItem(Strict):
    type: Literal["function_call"]
    call_id: Annotated[str, Field(min_length=1, max_length=256)]
    name: Annotated[str, Field(min_length=1, max_length=64)]
    arguments: str
    id: ItemId | None = None
    status: str | None = None


class FunctionCallOutputItem(Strict):
    type: Literal["function_call_output"]
    call_id: Annotated[str, Field(min_length=1, max_length=256)]
    output: str
    id: ItemId | None = None
    status: str | None = None


class ReasoningText(Strict):
    type: Literal["reasoning_text"]
    text: str


class SummaryText(Strict):
    type: Literal["summary_text"]
    text: str


class ReasoningItem(Strict):
    """An earlier answer's thought, replayed: it goes back to the template with the assistant turn after
    it (which keeps or drops it)."""

    type: Literal["reasoning"]
    id: ItemId | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: None = None
    status: str | None = None

    def text(self) -> str:
        return "".join(p.text for p in self.content or [])


def _item_kind(value: Any) -> str:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", "message")
    return str(kind)


Item = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_kind),
]


class FunctionTool(Strict):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str | None = None
    parameters: JSONObject = Field(default_factory=no_parameters)
    strict: bool | None = None


class FunctionChoice(Strict):
    type: Literal["function"]
    name: str


class TextFormat(Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str, Field(max_length=64)] | None = None
    description: str | None = None
    schema_: Annotated[JSONObject | None, Field(alias="schema")] = None
    strict: bool | None = None


class TextConfig(Strict):
    format: TextFormat | None = None


class Reasoning(Strict):
    """A thinking model's thought: off (`none`, `minimal`) or on; no summaries (the thought is given
    whole, as `reasoning_text`)."""

    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    summary: None = None


LOGPROBS = "message.output_text.logprobs"
INCLUDABLE = (LOGPROBS,)


class ResponsesRequest(Strict):
    model: str | None = None
    input: str | Annotated[list[Item], Field(min_length=1)]
    instructions: str | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    tools: Annotated[list[FunctionTool], Field(max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    metadata: Annotated[dict[str, Annotated[str, Field(max_length=512)]], Field(max_length=16)] | None = None
    user: str | None = None
    truncation: Literal["disabled"] | None = None
    reasoning: Reasoning | None = None
    reasoning_budget: Annotated[int, Field(ge=0)] | None = None  # llmhost: most thought tokens
    # what the answer adds: an empty list asks for nothing (the OpenAI Agents SDK sends one every time)
    include: list[str] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    # vLLM: admission order among waiting requests, lowest first (a batch job's lines default to 1)
    priority: Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX)] = 0

    def wants_logprobs(self) -> bool:
        """Whether `include` asks for the output's logprobs; anything else it asks is a 400 naming it."""
        for i, value in enumerate(self.include or []):
            if value not in INCLUDABLE:
                raise APIError(
                    400,
                    f"include {value!r} is not supported: llmhost can include {', '.join(INCLUDABLE)}",
                    field=f"include.{i}",
                )
        return LOGPROBS in (self.include or [])


def check_items(body: Any) -> None:
    """Item and content types llmhost cannot read are a 400 naming them, before validation."""
    if not isinstance(body, dict) or not isinstance(body.get("input"), list):
        return
    for i, item in enumerate(body["input"]):
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if isinstance(kind, str) and kind not in ITEM_TYPES:
            raise APIError(
                400,
                f"input items of type {kind!r} are not supported: llmhost reads "
                f"{', '.join(ITEM_TYPES)} items",
                field=f"input.{i}.type",
            )
        parts = item.get("content")
        for j, part in enumerate(parts if isinstance(parts, list) else []):
            ptype = part.get("type") if isinstance(part, dict) else None
            if isinstance(ptype, str) and ptype not in PART_TYPES:
                what = "files are" if ptype == "input_file" else f"{ptype!r} parts are"
                raise APIError(
                    400,
                    f"{what} not supported: llmhost reads {', '.join(PART_TYPES)} parts",
                    field=f"input.{i}.content.{j}.type",
                )
