"""The bodies llmhost answers, as the OpenAPI document shows them (the serving layer writes them as dicts;
tests/integration/test_openapi_fuzz.py checks every answer of a real server against these schemas).

Open models (extra members allowed): each lists the members every answer has, so that a client may rely
on them; llama-server's extensions (`timings`...) come on top.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, RootModel


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- OpenAI ---------------------------------------------------------------------------------------------
class Usage(Open):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(Open):
    index: int
    text: str
    logprobs: dict[str, Any] | None
    finish_reason: Literal["stop", "length", "abort", "error"] | None


class CompletionResponse(Open):
    """`POST /v1/completions` without `stream` (with `stream: true`: `text/event-stream` of chunks of
    this shape, then `data: [DONE]`)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class AssistantMessage(Open):
    role: Literal["assistant"]
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(Open):
    index: int
    message: AssistantMessage
    logprobs: dict[str, Any] | None
    finish_reason: Literal["stop", "length", "tool_calls", "abort", "error"] | None


class ChatCompletionResponse(Open):
    """`POST /v1/chat/completions` without `stream` (with `stream: true`: `text/event-stream` of
    `chat.completion.chunk` objects, then `data: [DONE]`)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class Embedding(Open):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # base64 with encoding_format "base64"


class EmbeddingsResponse(Open):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: dict[str, int]


# -- TGI ------------------------------------------------------------------------------------------------
class Generation(Open):
    """TGI's `/generate` answer (`details` with `parameters.details: true`)."""

    generated_text: str
    details: dict[str, Any] | None = None


class Info(Open):
    model_id: str
    max_input_tokens: int
    max_total_tokens: int
    version: str


# -- Anthropic and Responses -----------------------------------------------------------------------------
class AnthropicUsage(Open):
    input_tokens: int
    output_tokens: int


class AnthropicMessage(Open):
    """`POST /v1/messages` without `stream` (with `stream: true`: Anthropic's named SSE events)."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    stop_sequence: str | None
    usage: AnthropicUsage


class TokenCount(Open):
    input_tokens: int


class ResponseObject(Open):
    """`POST /v1/responses` without `stream` (with `stream: true`: the `response.*` SSE events)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None


# -- tokenizer, probes ----------------------------------------------------------------------------------
class TokenPiece(Open):
    id: int
    piece: str | list[int]


class Tokens(Open):
    """The prompt's token ids (with `with_pieces: true`: each id with its text); for vLLM's body also
    `count`, `max_model_len` and `token_strs`."""

    tokens: list[int] | list[TokenPiece]


class Detokenized(Open):
    content: str


class TokenizerInfo(Open):
    tokenizer_class: str
    model: str
    model_max_length: int
    vocab_size: int


class Health(Open):
    """The model's state (`loading`, `ready`, `failed`...) and the server's phase; 503 until it serves."""

    status: str
    phase: str
    error: str | None = None


class Generations(RootModel[list[Generation]]):
    """TGI's `POST /` (and /invocations with `inputs`): a list of one generation."""
