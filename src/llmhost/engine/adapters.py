"""The LoRA adapters an engine loaded, by name: a request's are checked when it arrives, and each
step's set is applied to the context before its decode."""

from __future__ import annotations

from typing import Any

from llmhost.engine.llama import LlamaModel, ModelLoadError
from llmhost.engine.lora import AdapterSet, AdapterSpec, adapter_set
from llmhost.engine.request import GenerationRequest, InvalidRequestError


class LoadedAdapters:
    def __init__(self, model: LlamaModel, specs: tuple[AdapterSpec, ...]) -> None:
        """Load every adapter; on a refused one the model is closed and ModelLoadError names it."""
        self.model = model
        self._handles: dict[str, Any] = {}  # freed by llama.cpp with the model
        for spec in specs:
            try:
                self._handles[spec.name] = model.load_adapter(spec.path)
            except ModelLoadError as exc:
                model.close()
                raise ModelLoadError(f"--lora {spec.name}: {exc}") from exc

    def __bool__(self) -> bool:
        return bool(self._handles)

    def check(self, request: GenerationRequest) -> None:
        """Put the request's adapters in canonical form; InvalidRequestError for one not loaded."""
        request.adapters = adapter_set(request.adapters)
        for name, _ in request.adapters:
            if name not in self._handles:
                loaded = ", ".join(self._handles) or "none"
                raise InvalidRequestError("lora", f"no LoRA adapter named {name!r} (loaded: {loaded})")

    def apply(self, adapters: AdapterSet) -> None:
        """Have the decodes that follow run with `adapters` (nothing to do when none is loaded)."""
        if self._handles:
            self.model.use_adapters([(self._handles[name], scale) for name, scale in adapters])
