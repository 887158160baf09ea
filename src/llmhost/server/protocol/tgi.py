"""Text Generation Inference payloads (also what SageMaker's LLM containers accept)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, PlainValidator
from pydantic_core import PydanticCustomError

from llmhost.engine.request import INT32_MAX
from llmhost.server.protocol.limits import MAX_STOP_SEQUENCES
from llmhost.server.protocol.openai import STRICT, StopString

# TGI's own bound on top_n_tokens
MAX_TOP_N_TOKENS = 5
JSON_TYPES = {bool: "a valid boolean", int: "a valid integer"}


def json_type(kind: type) -> BeforeValidator:
    """The value's JSON type before a Literal compares it: Literal[False] would take 0 and Literal[1]
    true (Python finds them equal), even in strict mode."""

    def check(value: Any) -> Any:
        if value is not None and type(value) is not kind:
            raise PydanticCustomError(f"{kind.__name__}_type", f"Input should be {JSON_TYPES[kind]}")
        return value

    return BeforeValidator(check)


class Grammar(BaseModel):
    model_config = STRICT

    type: Literal["json", "regex"]
    value: Any


class TGIParameters(BaseModel):
    """TGI's `parameters`; a field llmhost does not implement is refused with 400, never ignored."""

    model_config = STRICT

    max_new_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(gt=0.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    top_k: Annotated[int, Field(gt=0, le=INT32_MAX)] | None = None
    typical_p: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0)] | None = None
    frequency_penalty: float | None = None
    do_sample: bool = False
    return_full_text: bool = False
    stop: Annotated[list[StopString], Field(max_length=MAX_STOP_SEQUENCES)] = Field(default_factory=list)
    seed: Annotated[int, Field(ge=0)] | None = None
    details: bool = False
    decoder_input_details: bool = False
    top_n_tokens: Annotated[int, Field(ge=0, le=MAX_TOP_N_TOKENS)] | None = None
    truncate: Annotated[int, Field(ge=1)] | None = None
    grammar: Grammar | None = None
    # accepted at their neutral values only (clients send them); anything else is refused
    best_of: Annotated[Literal[1] | None, json_type(int)] = None
    watermark: Annotated[Literal[False], json_type(bool)] = False
    adapter_id: str | None = None  # a LoRA adapter loaded with --lora

    @property
    def sampling(self) -> bool:
        """TGI samples when asked to, or when any warper is set."""
        return self.do_sample or any(
            v is not None and v != neutral
            for v, neutral in (
                (self.temperature, 1.0),
                (self.top_p, 1.0),
                (self.top_k, 0),
                (self.typical_p, 1.0),
            )
        )


class MultimodalPrompt(BaseModel):
    """llama-server's prompt object: a prompt and the base64 images or audio that take the places of its
    media markers (`<__media__>`), in order."""

    model_config = STRICT

    prompt_string: Annotated[str, Field(min_length=1)]
    multimodal_data: list[str] | None = None


Prompt = Annotated[str, Field(min_length=1)]


def _inputs(value: Any) -> str | MultimodalPrompt:
    """A string or llama-server's prompt object, told apart by JSON type so that a refusal names `inputs`
    (or the object's field), not a member of the union."""
    if isinstance(value, dict):
        return MultimodalPrompt.model_validate(value)
    if not isinstance(value, str):
        raise PydanticCustomError(
            "inputs_type", "Input should be a string, or an object {prompt_string, multimodal_data}"
        )
    if not value:
        raise PydanticCustomError("string_too_short", "String should have at least 1 character")
    return value


class TGIRequest(BaseModel):
    model_config = STRICT

    inputs: Annotated[
        str | MultimodalPrompt, PlainValidator(_inputs, json_schema_input_type=Prompt | MultimodalPrompt)
    ]
    parameters: TGIParameters = Field(default_factory=TGIParameters)
    stream: bool = False

    @property
    def text(self) -> str:
        """The prompt's text (with its media markers, where it has media)."""
        return self.inputs if isinstance(self.inputs, str) else self.inputs.prompt_string

    @property
    def media(self) -> list[tuple[str, str]]:
        """The base64 media, each with the field it came from."""
        data = [] if isinstance(self.inputs, str) else self.inputs.multimodal_data or []
        return [(f"inputs.multimodal_data[{i}]", item) for i, item in enumerate(data)]
