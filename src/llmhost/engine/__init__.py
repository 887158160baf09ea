"""llama.cpp model + continuous-batching scheduler, sampling, prefix cache."""

from llmhost.engine.config import EngineConfig, available_cpus
from llmhost.engine.engine import Engine, EngineObserver, EngineStats
from llmhost.engine.llama import LlamaModel, ModelInfo, ModelLoadError
from llmhost.engine.loop import AsyncEngine, EngineState, RequestStream
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
    Timings,
    TokenLogprob,
)

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
    "Timings",
    "TokenLogprob",
    "available_cpus",
]
