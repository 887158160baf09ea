"""Serving logic between the protocol models and the engine (vLLM's `entrypoints` split)."""

from llmhost.server.serving.context import ServingContext

__all__ = ["ServingContext"]
