"""Bodies of the LoRA adapter admin routes (`/admin/adapters`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from llmhost.server.protocol.openai import Strict

ADAPTER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"


class LoadAdapterRequest(Strict):
    name: Annotated[str, Field(pattern=ADAPTER_NAME)]  # what requests select it by (`model`, adapter_id)
    # a model reference: a local file, s3://..., hf://OWNER/REPO/FILE.gguf
    path: Annotated[str, Field(min_length=1, max_length=4096)]
    scale: Annotated[float, Field(allow_inf_nan=False)] = 1.0  # what a request selecting it by name gets


class UnloadAdapterRequest(Strict):
    name: Annotated[str, Field(min_length=1, max_length=128)]


class AdapterInfo(BaseModel):
    name: str
    path: str
    scale: float
    loaded: bool  # in llama.cpp now; else loaded again when a request selects it (--max-loras)
    requests: int  # requests running or waiting with it


class AdapterList(BaseModel):
    object: str = "list"
    data: list[AdapterInfo]
    max_loras: int  # most adapters kept loaded at once (0: no limit)
