"""OpenAI completions and chat completions, with llama-server / vLLM sampling extensions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmhost.engine.request import INT32_MAX, MAX_LOGPROBS
from llmhost.server.protocol.limits import MAX_LOGIT_BIAS, MAX_STOP_CHARS, MAX_STOP_SEQUENCES

StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields both OpenAI endpoints share; the last group are llama-server/vLLM extensions."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 1.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    n: Annotated[int, Field(ge=1, le=1)] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] = 0.0
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] = 0.0
    seed: int | None = None
    logit_bias: (
        Annotated[dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]], Field(max_length=MAX_LOGIT_BIAS)]
        | None
    ) = None
    user: str | None = None
    top_k: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    repetition_penalty: Annotated[float, Field(gt=0.0)] = 1.0
    ignore_eos: bool = False

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionRequest(SamplingFields):
    prompt: str | list[int]
    max_tokens: Annotated[int, Field(ge=1)] | None = 16
    logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    echo: bool = False


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None


# -- /v1/models response (completions are built as dicts by the serving layer) ---------------------
class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "llmhost"
    meta: dict[str, Any] | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
