"""OpenAI's /v1/embeddings request."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, StrictStr, field_validator
from pydantic_core import PydanticCustomError

from llmhost.server.protocol.openai import Strict

SHAPES = "a string, a list of strings, a list of token ids or a list of token-id lists"


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value)


class EmbeddingRequest(Strict):
    # strict types: a number is never read as a string or the reverse
    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None  # OpenAI's end-user id: accepted, as by the completions APIs

    @field_validator("input", mode="before")
    @classmethod
    def _one_shape(cls, value: Any) -> Any:
        """One message naming the accepted shapes, instead of one error per union member."""
        if isinstance(value, str) or _is_ids(value):
            return value
        if isinstance(value, list) and (
            all(isinstance(x, str) for x in value) or all(_is_ids(x) for x in value)
        ):
            return value
        raise PydanticCustomError("input_shape", f"input must be {SHAPES}")

    def inputs(self) -> list[str | list[int]]:
        """The inputs, each a text or token ids."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if value and all(isinstance(x, int) for x in value):
            return [[int(x) for x in value]]  # type: ignore[arg-type]
        return list(value)  # type: ignore[arg-type]
