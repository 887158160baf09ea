"""The tokenizer endpoints, in llama-server's shape and in vLLM's (what lm-eval's remote tokenizer
calls)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TokenizeRequest(BaseModel):
    """llama-server's body (`content`, `add_special`, `with_pieces`) or vLLM's (`prompt`,
    `add_special_tokens`, `return_token_strs`, `model`): the answer has the shape of the one sent."""

    model_config = ConfigDict(extra="ignore", strict=True)

    content: str | None = None
    add_special: bool = False
    with_pieces: bool = False
    prompt: str | None = None
    add_special_tokens: bool = True
    return_token_strs: bool = False
    model: str | None = None


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    tokens: list[int]
    model: str | None = None
