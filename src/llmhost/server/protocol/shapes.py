"""The parts of llmhost's answers that the streaming path writes per token, as TypedDicts: a chunk or
event is a plain dict (no validation per token) whose shape mypy checks, and the response models of
protocol/outputs.py, which the OpenAPI document shows, are built of the same parts.

Why not pydantic models here: building 10,000 `chat.completion.chunk`s as a pydantic model and writing
them with `model_dump_json` took 80.5 ms, as a TypedDict and `json.dumps` 60.7 ms: 8.0 against 6.1 µs a
token, a third more (best of 7; benchmarks/stream_chunks.py; on 2 busy shared cores 384-406 against
282-291 ms).

Key order is the order written: declare the keys in the order clients see them. pydantic keeps a
TypedDict's declared order (and its undeclared keys) when a response model holds one.
"""

from __future__ import annotations

from typing import (
    Literal,
    NotRequired,  # pydantic needs typing_extensions' on 3.11
)

from typing_extensions import TypedDict

from llmhost.shared.jsontypes import JSONObject, JSONValue


# -- OpenAI ---------------------------------------------------------------------------------------------
class CachedTokens(TypedDict):
    cached_tokens: int


class ReasoningTokens(TypedDict):
    reasoning_tokens: int


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: CachedTokens
    completion_tokens_details: ReasoningTokens


class TopLogprob(TypedDict):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(TypedDict):
    content: list[TokenLogprob]


class CompletionLogprobs(TypedDict):
    """The legacy completions' logprobs; with echo the first prompt token has none (null)."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text


class ToolCall(TypedDict):
    index: NotRequired[int]  # streamed deltas only
    id: str
    type: Literal["function"]
    function: FunctionCall


class Delta(TypedDict, total=False):
    role: Literal["assistant"]
    reasoning_content: str
    content: str
    tool_calls: list[ToolCall]


class ChunkChoice(TypedDict):
    """A streamed chat choice (`delta`) or completion choice (`text`)."""

    index: int
    text: NotRequired[str]
    delta: NotRequired[Delta]
    logprobs: ChatLogprobs | CompletionLogprobs | None
    finish_reason: str | None


Timings = dict[str, float | int]  # the engine's Timings.as_dict(): llama-server's `timings`


class Chunk(TypedDict):
    """A `chat.completion.chunk` or streamed `text_completion`; `usage` in the last with
    `stream_options.include_usage`, `timings` in a choice's last."""

    id: str
    object: str
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: NotRequired[Usage]
    timings: NotRequired[Timings | None]


class EmbeddingData(TypedDict):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # base64 with encoding_format "base64"


class EmbeddingsUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class Embeddings(TypedDict):
    object: Literal["list"]
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingsUsage


# -- Responses ------------------------------------------------------------------------------------------
class OutputText(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[JSONObject]  # none written
    logprobs: list[TokenLogprob]


class ReasoningText(TypedDict):
    type: Literal["reasoning_text"]
    text: str


class MessageItem(TypedDict):
    id: str
    type: Literal["message"]
    status: str
    role: Literal["assistant"]
    content: list[OutputText]


class ReasoningItem(TypedDict):
    id: str
    type: Literal["reasoning"]
    summary: list[ReasoningText]  # none written
    content: list[ReasoningText]
    status: str


class FunctionCallItem(TypedDict):
    id: str
    type: Literal["function_call"]
    status: str
    call_id: str
    name: str
    arguments: str  # JSON text


OutputItem = MessageItem | ReasoningItem | FunctionCallItem


class ResponsesUsage(TypedDict):
    input_tokens: int
    input_tokens_details: CachedTokens
    output_tokens: int
    output_tokens_details: ReasoningTokens
    total_tokens: int


class ResponseError(TypedDict):
    code: str
    message: str


class IncompleteDetails(TypedDict):
    reason: str


class ReasoningSetting(TypedDict):
    effort: str | None
    summary: None


class TextSetting(TypedDict):
    format: JSONObject  # {"type": "text"}, or the request's text.format


class ResponseEcho(TypedDict):
    """The request's settings as the response object repeats them (OpenAI's order)."""

    model: str
    instructions: str | None
    max_output_tokens: int | None
    metadata: dict[str, str]
    parallel_tool_calls: bool
    previous_response_id: None
    reasoning: ReasoningSetting
    store: bool
    temperature: float
    text: TextSetting
    tool_choice: JSONValue  # "auto", "none", "required", or the request's named function
    tools: list[JSONObject]  # the request's, as sent
    top_p: float
    truncation: Literal["disabled"]
    user: str | None


class ResponseBody(ResponseEcho):
    """The response object, as each `response.*` event carries it (outputs.ResponseObject documents
    it, and checks the whole answer)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    output: list[OutputItem]
    usage: ResponsesUsage | None


# -- Anthropic ------------------------------------------------------------------------------------------
class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ThinkingBlock(TypedDict):
    type: Literal["thinking"]
    thinking: str
    signature: str  # llmhost signs nothing: empty


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: JSONObject  # the call's arguments, as the model wrote them


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock


class AnthropicUsage(TypedDict):
    input_tokens: int
    output_tokens: int


# -- TGI ------------------------------------------------------------------------------------------------
class PrefillToken(TypedDict):
    id: int
    text: str
    logprob: float | None  # the first prompt token has none


class TGIToken(PrefillToken):
    special: bool


class TGIDetails(TypedDict):
    """`details` of a generation: the whole of them for /generate, the first three (and timings) in a
    stream's last message."""

    finish_reason: str | None
    generated_tokens: int
    seed: int | None
    prefill: NotRequired[list[PrefillToken]]
    tokens: NotRequired[list[TGIToken]]
    top_tokens: NotRequired[list[list[TGIToken]]]
    timings: NotRequired[Timings]
    best_of_sequences: NotRequired[None]


class StreamedToken(TypedDict):
    """A message of TGI's /generate_stream: one per token, the last with the text and details."""

    index: int
    token: TGIToken
    top_tokens: list[TGIToken] | None
    generated_text: str | None
    details: TGIDetails | None


# -- Ollama ---------------------------------------------------------------------------------------------
class OllamaFunction(TypedDict):
    index: int
    name: str
    arguments: JSONObject  # the call's arguments, as the model wrote them


class OllamaToolCall(TypedDict):
    id: str
    function: OllamaFunction


class OllamaMessage(TypedDict):
    role: Literal["assistant"]
    content: str
    thinking: NotRequired[str]
    tool_calls: NotRequired[list[OllamaToolCall]]


class OllamaPiece(TypedDict):
    """A line of /api/chat (`message`) or /api/generate (`response`, `thinking`); the last (`done`)
    with the figures, durations in nanoseconds, and for a templated generate the `context`."""

    model: str
    created_at: str
    message: NotRequired[OllamaMessage]
    response: NotRequired[str]
    thinking: NotRequired[str]
    done: bool
    done_reason: NotRequired[str]
    total_duration: NotRequired[int]
    load_duration: NotRequired[int]
    prompt_eval_count: NotRequired[int]
    prompt_eval_duration: NotRequired[int]
    eval_count: NotRequired[int]
    eval_duration: NotRequired[int]
    context: NotRequired[list[int]]
