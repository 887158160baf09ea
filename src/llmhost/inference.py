"""What a model directory's code/inference.py may import from llmhost.

SageMaker's inference toolkit hands `predict_fn(data, model)` whatever `model_fn` returned; a `model_fn`
that returns its own object (a tokenizer, a config, a pipeline) still reaches the running engine here:

    from llmhost.inference import engine_model

    def model_fn(model_dir):
        return {"template": open(f"{model_dir}/template.txt").read()}

    def predict_fn(data, model):
        return {"text": engine_model().generate(model["template"].format(**data), max_new_tokens=64)}

The object is the one `predict_fn` gets by default when there is no `model_fn`: `generate`/`stream`
from plain functions, `agenerate`/`astream` from `async def` ones; its requests are batched with
everyone else's. This module imports nothing of the server: the server binds the model at startup.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

__all__ = ["EngineModel", "bind_engine_model", "engine_model"]


class EngineModel(Protocol):
    @property
    def name(self) -> str: ...

    def generate(self, prompt: str, **sampling: Any) -> str: ...

    def stream(self, prompt: str, **sampling: Any) -> Iterator[str]: ...

    async def agenerate(self, prompt: str, **sampling: Any) -> str: ...

    def astream(self, prompt: str, **sampling: Any) -> AsyncIterator[str]: ...


_bound: EngineModel | None = None


def engine_model() -> EngineModel:
    """The running engine's model object (from `model_fn` on); RuntimeError outside a server."""
    if _bound is None:
        raise RuntimeError(
            "llmhost.inference.engine_model(): no engine runs in this process; it is "
            "available to code/inference.py served by `llmhost serve`, from model_fn on"
        )
    return _bound


def bind_engine_model(model: EngineModel | None) -> None:
    """Called by the server at startup (and with None at shutdown); not for inference.py."""
    global _bound
    _bound = model
