"""The bodies llmhost answers, as the OpenAPI document shows them: the serving layer builds its answers
from these models (and the streaming path from the TypedDicts of protocol/shapes.py they are made of),
so what is documented is what is sent. Answer with `json_response()` (or `dump()`): members left
unset (an optional member a body does not carry) are left out, members set to None are written as null.

Open models (extra members allowed): each lists the members every answer has, so that a client may rely
on them; llama-server's extensions (`timings`...) come on top.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, RootModel
from starlette.responses import JSONResponse

from llmhost.server.protocol import shapes
from llmhost.shared.jsontypes import JSONObject, JSONValue


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


def json_response(model: BaseModel, status_code: int = 200) -> JSONResponse:
    """The JSON response of a model, its members in their declared order."""
    return JSONResponse(dump(model), status_code)


def dump(model: BaseModel) -> JSONObject:
    return model.model_dump(mode="json", exclude_unset=True)


# -- OpenAI ---------------------------------------------------------------------------------------------
Finish = Literal["stop", "length", "abort", "error"]


class CompletionChoice(Open):
    index: int
    text: str
    logprobs: shapes.CompletionLogprobs | None
    finish_reason: Finish | None


class CompletionResponse(Open):
    """`POST /v1/completions` without `stream` (with `stream: true`: `text/event-stream` of chunks of
    this shape, then `data: [DONE]`)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: shapes.Usage
    timings: shapes.Timings | None  # llama-server's, of the first choice


class AssistantMessage(Open):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = None  # a thinking model's thought, when it had one
    tool_calls: list[shapes.ToolCall] | None = None


class ChatChoice(Open):
    index: int
    message: AssistantMessage
    logprobs: shapes.ChatLogprobs | None
    finish_reason: Finish | Literal["tool_calls"] | None


class ChatCompletionResponse(Open):
    """`POST /v1/chat/completions` without `stream` (with `stream: true`: `text/event-stream` of
    `chat.completion.chunk` objects, then `data: [DONE]`)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: shapes.Usage
    timings: shapes.Timings | None


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
    details: shapes.TGIDetails | None = None


class Info(Open):
    """TGI's GET /info: the model and the limits the router enforces."""

    model_id: str
    model_sha: None
    model_pipeline_tag: str
    model_dtype: str
    model_device_type: str
    max_concurrent_requests: int
    max_best_of: int
    max_stop_sequences: int
    max_input_tokens: int
    max_input_length: int
    max_total_tokens: int
    max_batch_total_tokens: int
    max_batch_size: int
    max_client_batch_size: int
    max_top_n_tokens: int
    waiting_served_ratio: None
    max_waiting_tokens: None
    validation_workers: int
    router: str
    version: str
    sha: None
    docker_label: None


# -- Anthropic and Responses -----------------------------------------------------------------------------
class AnthropicMessage(Open):
    """`POST /v1/messages` without `stream` (with `stream: true`: Anthropic's named SSE events)."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[shapes.ContentBlock]
    stop_reason: str | None
    stop_sequence: str | None
    usage: shapes.AnthropicUsage


class TokenCount(Open):
    input_tokens: int


class ResponseObject(Open):
    """`POST /v1/responses` without `stream` (with `stream: true`: the `response.*` SSE events, which
    carry this object as it grows). The request's settings are repeated as OpenAI does."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    error: shapes.ResponseError | None
    incomplete_details: shapes.IncompleteDetails | None
    model: str
    instructions: str | None
    max_output_tokens: int | None
    metadata: dict[str, str]
    parallel_tool_calls: bool
    previous_response_id: None
    reasoning: shapes.ReasoningSetting
    store: bool
    temperature: float
    text: shapes.TextSetting
    tool_choice: JSONValue  # "auto", "none", "required", or the request's named function
    tools: list[JSONObject]  # the request's, as sent
    top_p: float
    truncation: Literal["disabled"]
    user: str | None
    output: list[shapes.OutputItem]
    usage: shapes.ResponsesUsage | None


# -- tokenizer, probes ----------------------------------------------------------------------------------
class TokenPiece(Open):
    id: int
    piece: str | list[int]


class Tokens(Open):
    """llama-server's /tokenize: the prompt's token ids (with `with_pieces: true`: each id with its
    text)."""

    tokens: list[int] | list[TokenPiece]


class VLLMTokens(Open):
    """vLLM's /tokenize (a body with `prompt`); `token_strs` with `return_token_strs: true`."""

    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None


class Detokenized(Open):
    """The text under both names: llama-server's `content` and vLLM's `prompt`."""

    content: str
    prompt: str


class TokenizerInfo(Open):
    tokenizer_class: str
    model: str
    bos_token: str | None
    eos_token: str | None
    pad_token: str | None
    add_bos_token: bool
    chat_template: str | None
    model_max_length: int
    vocab_size: int


class Health(Open):
    """The model's state (`loading`, `ready`, `failed`...) and the server's phase; 503 until it serves."""

    status: str
    phase: str
    error: str | None = None


class Generations(RootModel[list[Generation]]):
    """TGI's `POST /` (and /invocations with `inputs`): a list of one generation."""
