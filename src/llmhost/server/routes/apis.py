"""The routes a copy serves its clients, one module an API: the app mounts them (with the adapters'
admin routes), and the endpoint router relays each and documents it from the same declarations."""

from __future__ import annotations

from types import ModuleType

from llmhost.server.routes import (
    anthropic,
    embeddings,
    ollama,
    openai,
    ops,
    rerank,
    responses,
    runtime,
    sagemaker,
    tei,
    tgi,
)

CLIENT_APIS: tuple[ModuleType, ...] = (
    sagemaker,
    runtime,
    openai,
    anthropic,
    responses,
    embeddings,
    rerank,
    tei,
    tgi,
    ollama,
    ops,
)
