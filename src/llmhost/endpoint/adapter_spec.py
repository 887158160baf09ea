"""LoRA adapters declared under a component: each copy loads them (`llmhost serve --lora`), and a
request naming one in its `model` is routed to that component, whose copy applies it."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

ADAPTER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


class AdapterEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # what requests name in `model` (OpenAI, Anthropic, Responses, Ollama) or TGI's adapter_id
    name: str = Field(pattern=ADAPTER_NAME)
    # a LoRA GGUF for the component's model: a file, s3://..., hf://OWNER/REPO/FILE.gguf; a relative path
    # is read from the directory `endpoint up` runs in, as the component's model is
    path: str = Field(min_length=1)
    scale: float = 1.0  # what a request naming the adapter gets

    @field_validator("scale")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("scale must be a finite number")
        return value

    @property
    def lora_option(self) -> str:
        """The copy's `--lora` value."""
        return f"{self.name}={self.path}:{self.scale!r}"


class WithAdapters(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def adapters(self) -> list[AdapterEntry]: ...


def check_names(components: Iterable[WithAdapters]) -> None:
    """Every adapter's name names one adapter of the endpoint and no component: a request's `model`
    routes to exactly one place."""
    comps = list(components)
    owner: dict[str, str] = {c.name: c.name for c in comps}
    for c in comps:
        for a in c.adapters:
            if a.name in owner:
                taken = "a component" if owner[a.name] == a.name else f"an adapter of {owner[a.name]!r}"
                raise ValueError(f"adapter {a.name!r} of component {c.name!r}: the name of {taken}")
            owner[a.name] = c.name
