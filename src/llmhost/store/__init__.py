"""Model references: a local `.gguf` path, a model directory, the bundled default model, or s3:// (cached)."""

from llmhost.store.model import ModelNotFoundError, ResolvedModel
from llmhost.store.resolve import DEFAULT_MODEL_REF, resolve, resolve_model

__all__ = ["DEFAULT_MODEL_REF", "ModelNotFoundError", "ResolvedModel", "resolve", "resolve_model"]
