"""llama-server's tokenizer endpoints."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    content: str
    add_special: bool = False
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    tokens: list[int]
