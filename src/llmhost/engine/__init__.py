"""llama.cpp model + continuous-batching scheduler, sampling, prefix cache.

The package import is light: llama.cpp loads with the first name that needs it (`Engine`,
`LlamaModel`, ...), so `llmhost.engine.config` (the engine's limits and their defaults) can be read by
the router, bench and the tuner without loading a model library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmhost.engine.config import EngineConfig, available_cpus
    from llmhost.engine.engine import Engine
    from llmhost.engine.llamacpp.gguf_meta import ModelInfo
    from llmhost.engine.llamacpp.model import LlamaModel, ModelLoadError
    from llmhost.engine.loop import AsyncEngine
    from llmhost.engine.request import (
        Constraint,
        ConstraintKind,
        EngineError,
        EngineUnavailableError,
        FinishReason,
        GenerationEvent,
        GenerationRequest,
        InvalidRequestError,
        QueueFullError,
        RequestTooLargeError,
        SamplingParams,
        Thinking,
        Timings,
        TokenLogprob,
    )
    from llmhost.engine.stats import EngineObserver, EngineStats
    from llmhost.engine.stream import RequestStream
    from llmhost.engine.worker import EngineState

# name → the module defining it, imported on first use
_HOMES = {
    "EngineConfig": "config",
    "available_cpus": "config",
    "Engine": "engine",
    "EngineObserver": "stats",
    "EngineStats": "stats",
    "LlamaModel": "llamacpp.model",
    "ModelInfo": "llamacpp.gguf_meta",
    "ModelLoadError": "llamacpp.model",
    "AsyncEngine": "loop",
    "EngineState": "worker",
    "RequestStream": "stream",
    **dict.fromkeys(
        (
            "Constraint",
            "ConstraintKind",
            "EngineError",
            "EngineUnavailableError",
            "FinishReason",
            "GenerationEvent",
            "GenerationRequest",
            "InvalidRequestError",
            "QueueFullError",
            "RequestTooLargeError",
            "SamplingParams",
            "Thinking",
            "Timings",
            "TokenLogprob",
        ),
        "request",
    ),
}

__all__ = [
    "AsyncEngine",
    "Constraint",
    "ConstraintKind",
    "Engine",
    "EngineConfig",
    "EngineError",
    "EngineObserver",
    "EngineState",
    "EngineStats",
    "EngineUnavailableError",
    "FinishReason",
    "GenerationEvent",
    "GenerationRequest",
    "InvalidRequestError",
    "LlamaModel",
    "ModelInfo",
    "ModelLoadError",
    "QueueFullError",
    "RequestStream",
    "RequestTooLargeError",
    "SamplingParams",
    "Thinking",
    "Timings",
    "TokenLogprob",
    "available_cpus",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
