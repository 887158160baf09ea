"""OpenAI completions and chat completions, with llama-server / vLLM sampling extensions."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmhost.engine.media import MEDIA_MARKER
from llmhost.engine.request import INT32_MAX, MAX_LOGPROBS
from llmhost.server.protocol.limits import MAX_LOGIT_BIAS, MAX_STOP_CHARS, MAX_STOP_SEQUENCES
from llmhost.shared.jsontypes import JSONObject

StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]


MAX_CHOICES = 16
MAX_PROMPTS = 64


# JSON types as the document states them: "stream": 0 is no boolean, "5" no integer (a 422 naming the
# field), as OpenAI and Anthropic answer; pydantic's lax mode would read both
STRICT = ConfigDict(extra="forbid", strict=True)


def no_parameters() -> JSONObject:
    """A tool's parameters when it declares none: an object of no properties."""
    return {"type": "object", "properties": {}}


class Strict(BaseModel):
    """A body part where a field llmhost does not implement is refused (400 naming it), not ignored,
    and a value of another JSON type than documented is refused (422), not converted."""

    model_config = STRICT


class StreamOptions(Strict):
    include_usage: bool = False


class JSONSchemaFormat(Strict):
    name: Annotated[str, Field(max_length=64)] = "response"
    description: str | None = None
    schema_: Annotated[JSONObject, Field(alias="schema")] = Field(default_factory=dict)
    strict: bool | None = None


class ResponseFormat(Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class LoraRef(Strict):
    """One adapter of llama-server's per-request `lora` list: by its place in the server's --lora
    options (`id`) or by name, with its scale."""

    id: Annotated[int, Field(ge=0)] | None = None
    name: str | None = None
    scale: Annotated[float, Field(allow_inf_nan=False)] = 1.0


class SamplingFields(Strict):
    """Fields both OpenAI endpoints share; the last group are llama-server/vLLM extensions."""

    model: str | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 1.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES)] = 1
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
    response_format: ResponseFormat | None = None
    service_tier: Literal["auto", "default"] | None = None
    top_k: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    repetition_penalty: Annotated[float, Field(gt=0.0)] = 1.0
    ignore_eos: bool = False
    typical_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    grammar: Annotated[str, Field(min_length=1)] | None = None  # llama-server: a GBNF grammar
    json_schema: JSONObject | None = None  # llama-server: a JSON schema
    lora: Annotated[list[LoraRef], Field(max_length=64)] | None = None  # llama-server: adapters and scales
    # vLLM: admission order among waiting requests, lowest first (a batch job's lines default to 1)
    priority: Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX)] = 0

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


TokenIds = Annotated[list[Annotated[int, Field(ge=0, le=INT32_MAX)]], Field(min_length=1)]
PromptList = Annotated[list[str], Field(min_length=1, max_length=MAX_PROMPTS)]
TokenIdLists = Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_PROMPTS)]


class CompletionRequest(SamplingFields):
    prompt: str | TokenIds | PromptList | TokenIdLists
    # 0 with echo: the prompt is scored (with logprobs), nothing generated (OpenAI's legacy behaviour)
    max_tokens: Annotated[int, Field(ge=0)] | None = 16
    logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    echo: bool = False
    best_of: Annotated[int, Field(ge=1, le=MAX_CHOICES)] | None = None
    suffix: Annotated[str, Field(max_length=0)] | None = None

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each a text or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [[int(x) for x in p]]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


class TextPart(Strict):
    type: Literal["text"]
    text: str


class ImageUrl(Strict):
    url: str  # a data: URI (base64); a remote http(s) URL is refused, never fetched
    detail: Literal["auto", "low", "high"] | None = None  # the projector sizes an image its own way


class ImagePart(Strict):
    type: Literal["image_url"]
    image_url: ImageUrl


class InputAudio(Strict):
    data: str  # base64
    format: Literal["wav", "mp3"]


class AudioPart(Strict):
    type: Literal["input_audio"]
    input_audio: InputAudio


ContentPart = Annotated[TextPart | ImagePart | AudioPart, Field(discriminator="type")]


class FunctionCall(Strict):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Strict):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    # an earlier assistant turn's thought, given back to the template (which keeps or drops it)
    reasoning_content: str | None = None

    def text(self) -> str:
        """The content as the chat template renders it: an image or audio part is the media marker
        where it stands (as llama-server writes it), for the projector to put the medium there."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text if isinstance(p, TextPart) else MEDIA_MARKER for p in self.content)


class FunctionDef(Strict):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str | None = None
    parameters: JSONObject = Field(default_factory=no_parameters)
    strict: bool | None = None


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(Strict):
    name: str


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    tools: Annotated[list[Tool], Field(max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    # a thinking model: its thought off ("none", "minimal") or on, the most tokens it may take (then its
    # end is forced; 0: off where the template can turn it off), and more chat template variables
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    reasoning_budget: Annotated[int, Field(ge=0)] | None = None
    chat_template_kwargs: JSONObject | None = None


# -- /v1/models response ---------------------------------------------------------------------------
class ModelMeta(BaseModel):
    """llama-server's `meta` of a model: what its GGUF says (once it is loaded)."""

    n_ctx_train: int
    n_vocab: int
    n_params: int
    size: int  # bytes
    description: str


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "llmhost"
    meta: ModelMeta | None = None
    parent: str | None = None  # a LoRA adapter's base model (vLLM's field); None: a base model
    # what it does here, in Ollama's words: completion, embedding, rank, and the input it reads besides
    # text: vision (images), audio (OpenAI's clients ignore it)
    capabilities: list[str] | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class AudioTextForm(BaseModel):
    """The multipart form of /v1/audio/transcriptions and /v1/audio/translations (for the document: the
    route reads the form itself). `language` and `stream` are a transcription's only."""

    file: bytes
    model: str
    language: str | None = None
    prompt: str | None = None
    response_format: Literal["json", "text", "verbose_json"] = "json"
    temperature: float = Field(0.0, ge=0.0, le=1.0)
    stream: bool = False


class AudioText(BaseModel):
    """A transcription or translation in `json`; `verbose_json` adds task, language, duration and one
    segment spanning the clip; `text` is the text alone."""

    text: str
