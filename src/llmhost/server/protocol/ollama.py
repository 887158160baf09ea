"""Ollama's native API (`/api/chat`, `/api/generate`, `/api/embed`, `/api/tags`, ...): its request
bodies, validated as llmhost validates every body (an unknown field or option is a 400 naming it), and
its answers, for the OpenAPI document."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from llmhost.engine.request import INT32_MAX
from llmhost.server.protocol.limits import MAX_STOP_CHARS, MAX_STOP_SEQUENCES
from llmhost.server.protocol.openai import Strict, no_parameters
from llmhost.server.protocol.shapes import OllamaMessage
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]
ThinkLevel = Literal["low", "medium", "high", "max"]
# Ollama's defaults when a request leaves a sampling option out (its runner's, for a Modelfile with none)
DEFAULTS: dict[str, float | int] = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.9,
    "repeat_penalty": 1.1,
    "repeat_last_n": 64,
}
# options Ollama applies when it loads a model: llmhost fixes them when a copy starts (serve's flags)
LOAD_OPTIONS = {
    "num_gpu": "llmhost runs on CPUs",
    "main_gpu": "llmhost runs on CPUs",
    "low_vram": "llmhost runs on CPUs",
    "num_thread": "--threads",
    "num_batch": "--max-batch-tokens",
    "use_mmap": "the model is mapped at load",
    "use_mlock": "the model is mapped at load",
    "numa": "the copy's CPUs are placed by its endpoint",
    "f16_kv": "--cache-type-k/--cache-type-v",
    "vocab_only": "the whole model is loaded",
}


class Options(Strict):
    """The Modelfile parameters a request may set; those llmhost maps onto its sampling and limits."""

    temperature: Annotated[float, Field(ge=0.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    typical_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    num_predict: int | None = None  # -1: until the context is full, -2: fill it (llmhost: the same)
    stop: Annotated[list[StopString], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    seed: int | None = None
    repeat_penalty: Annotated[float, Field(gt=0.0)] | None = None
    repeat_last_n: Annotated[int, Field(ge=-1, le=INT32_MAX)] | None = None  # -1: the whole context
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    num_ctx: Annotated[int, Field(ge=1)] | None = None
    num_keep: Annotated[int, Field(ge=-1)] | None = None  # what a context shift keeps: llmhost never shifts
    penalize_newline: bool | None = None  # true only: every token is penalized, newlines too
    mirostat: Annotated[int, Field(ge=0, le=0)] | None = None  # 0 only: off
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    tfs_z: Annotated[float, Field(ge=1.0, le=1.0)] | None = None


class ToolFunctionCall(Strict):
    name: str
    arguments: JSONObject = Field(default_factory=dict)
    index: int | None = None


class ToolCall(Strict):
    id: str | None = None
    type: Literal["function"] | None = None
    function: ToolFunctionCall


class Message(Strict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class FunctionDef(Strict):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str | None = None
    parameters: JSONObject = Field(default_factory=no_parameters)


class Tool(Strict):
    type: Literal["function"] = "function"
    function: FunctionDef


Format = Literal["", "json"] | JSONObject  # a JSON schema
KeepAlive = StrictStr | float | None


class _Generation(Strict):
    """What /api/chat and /api/generate share."""

    model: Annotated[str, Field(min_length=1)]
    format: Format | None = None
    options: Options | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: bool | ThinkLevel | None = None


class ChatRequest(_Generation):
    messages: list[Message] = Field(default_factory=list)
    tools: Annotated[list[Tool], Field(max_length=128)] | None = None


class GenerateRequest(_Generation):
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] | None = None
    raw: bool = False
    images: list[str] | None = None


class EmbedRequest(Strict):
    model: Annotated[str, Field(min_length=1)]
    input: StrictStr | list[StrictStr]
    truncate: bool = True
    dimensions: Annotated[int, Field(ge=1)] | None = None
    options: Options | None = None
    keep_alive: KeepAlive = None


class EmbeddingsRequest(Strict):
    """The older /api/embeddings: one prompt, one vector."""

    model: Annotated[str, Field(min_length=1)]
    prompt: StrictStr
    options: Options | None = None
    keep_alive: KeepAlive = None


class ModelRequest(Strict):
    """/api/show, /api/delete, /api/pull: one model by name (`name` is the older spelling)."""

    model: str | None = None
    name: str | None = None
    verbose: bool = False
    insecure: bool = False
    stream: bool = True

    def model_name(self) -> str:
        found = self.model or self.name
        if not found:
            raise APIError(400, "model is required", field="model")
        return found


class CopyRequest(Strict):
    source: Annotated[str, Field(min_length=1)]
    destination: Annotated[str, Field(min_length=1)]


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive_seconds(value: KeepAlive) -> float | None:
    """Seconds a model stays loaded after a request (Go's duration text, or a number of seconds);
    negative: forever; None: the server's default."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    try:
        return sign * float(body)
    except ValueError:
        pass
    parts = _DURATION.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise APIError(
            400, f'keep_alive {value!r} is not a duration (e.g. "5m", "1h30m", "-1", 0)', field="keep_alive"
        )
    return sign * sum(float(n) * _UNIT_S[u] for n, u in parts)


# -- answers (the document's schemas; whole answers are built as these, lines as shapes.OllamaPiece) ---
class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Details(Open):
    parent_model: str
    format: str
    family: str
    families: list[str]
    parameter_size: str
    quantization_level: str


class ChatResponse(Open):
    """A /api/chat answer; streamed, one per line (NDJSON), the last with `done: true` and the timings
    (nanoseconds)."""

    model: str
    created_at: str
    message: OllamaMessage
    done: bool
    done_reason: str | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class GenerateResponse(Open):
    """A /api/generate answer; streamed as ChatResponse is. `context`: the tokens to send back to go on
    (a templated prompt only)."""

    model: str
    created_at: str
    response: str
    thinking: str | None = None
    done: bool
    done_reason: str | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None
    context: list[int] | None = None


class EmbedResponse(Open):
    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class EmbeddingResponse(Open):
    embedding: list[float]


class ModelEntry(Open):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: Details


class TagsResponse(Open):
    models: list[ModelEntry]


class RunningModel(Open):
    name: str
    model: str
    size: int
    digest: str
    details: Details
    expires_at: str
    size_vram: int
    context_length: int


class PsResponse(Open):
    models: list[RunningModel]


class ShowResponse(Open):
    modelfile: str
    parameters: str
    template: str
    details: Details
    model_info: JSONObject  # the GGUF's metadata, as the file has it
    capabilities: list[str]
    modified_at: str


class VersionResponse(Open):
    version: str
