"""Model references: a local `.gguf` path, a model directory, or the bundled default model."""

from llmhost.store.resolve import DEFAULT_MODEL_REF, ModelNotFoundError, resolve_model

__all__ = ["DEFAULT_MODEL_REF", "ModelNotFoundError", "resolve_model"]
