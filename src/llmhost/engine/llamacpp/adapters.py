"""The LoRA adapters an engine knows, by name, and those of them loaded in llama.cpp.

A request's adapters are checked when it arrives (loading one that is known but not loaded), and each
step's set is applied to the context before its decode. With a budget (`max_loras`), adapters no
running sequence uses are freed least recently used first once more than the budget are loaded; one a
running sequence uses is never freed, so the budget is exceeded only while more adapters than it are
running at once.

Inside the engine an adapter is named by its key, `NAME@FINGERPRINT` (the file's path, size and
modification time): KV computed under an adapter, kept in the context or in host memory, is found again
after the adapter is freed and loaded back from the same file, and never for another file loaded later
under the same name.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from llmhost.engine.llamacpp.lora_fit import AdapterFitError, BaseShape, base_shape, check_adapter
from llmhost.engine.llamacpp.model import LlamaModel, ModelLoadError
from llmhost.engine.lora import AdapterSet, AdapterSpec, adapter_set
from llmhost.engine.request import GenerationRequest, InvalidRequestError
from llmhost.errors import ConflictError


class AdapterInUseError(ConflictError, ValueError):
    """The adapter cannot be unloaded now: requests run or wait with it."""


class AdapterConflictError(ConflictError, ValueError):
    """Another adapter is known under that name."""


@dataclass(frozen=True, slots=True)
class AdapterStatus:
    """An adapter as `GET /admin/adapters` lists it."""

    name: str
    path: str
    scale: float
    loaded: bool  # in llama.cpp now (else loaded again when a request selects it)
    requests: int  # requests running or waiting with it


def fingerprint(path: str) -> str:
    st = os.stat(path)
    ident = f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


class LoadedAdapters:
    def __init__(self, model: LlamaModel, specs: tuple[AdapterSpec, ...], budget: int = 0) -> None:
        """Load every adapter (each is checked against the model), keeping at most `budget` loaded
        (0: no limit); on a refused one the model is closed and ModelLoadError names it."""
        self.model = model
        self.budget = budget
        self._base: BaseShape | None = None  # the model's weights' shapes, read from its header once
        self._known: dict[str, tuple[AdapterSpec, str]] = {}  # name -> (spec, key)
        self._handles: OrderedDict[str, Any] = OrderedDict()  # key -> llama.cpp adapter, LRU first
        for spec in specs:
            try:
                self.load(spec, in_use=set())
            except ModelLoadError as exc:
                model.close()
                raise ModelLoadError(f"--lora {spec.name}: {exc}") from exc

    def __bool__(self) -> bool:
        return bool(self._known)

    @property
    def loaded(self) -> int:
        return len(self._handles)

    # -- lifecycle -----------------------------------------------------------------------------------
    def can_load(self, spec: AdapterSpec) -> None:
        """AdapterConflictError if another file is known under the spec's name."""
        known = self._known.get(spec.name)
        if known is not None and known[0] != spec:
            raise AdapterConflictError(
                f"an adapter named {spec.name!r} is loaded from {known[0].path} (scale {known[0].scale}); "
                "unload it first"
            )

    def load(self, spec: AdapterSpec, in_use: set[str]) -> bool:
        """Know and load `spec` (checked against the model: ModelLoadError names the file); False if it
        was known already. Frees idle adapters beyond the budget."""
        self.can_load(spec)
        if spec.name in self._known:
            return False
        try:  # a crafted header, or an adapter for another model, refused with the reason before llama.cpp
            if self._base is None:
                self._base = base_shape(self.model.path)
            check_adapter(spec.path, self._base)
        except AdapterFitError as exc:
            raise ModelLoadError(str(exc)) from exc
        key = f"{spec.name}@{fingerprint(spec.path)}"
        self._handles[key] = self.model.load_adapter(spec.path)
        self._known[spec.name] = (spec, key)
        self._trim(in_use | {key})
        return True

    def can_unload(self, name: str, in_use: set[str]) -> None:
        """KeyError if no adapter has that name, AdapterInUseError if requests use it."""
        if name not in self._known:
            raise KeyError(name)
        if self._known[name][1] in in_use:
            raise AdapterInUseError(f"adapter {name!r} is in use by running or waiting requests")

    def unload(self, name: str, in_use: set[str]) -> None:
        self.can_unload(name, in_use)
        _, key = self._known.pop(name)
        if key in self._handles:
            self._free(key)

    def _trim(self, in_use: set[str]) -> None:
        """Free least recently used adapters no request uses while more than the budget are loaded."""
        idle = [k for k in self._handles if k not in in_use]
        while self.budget and len(self._handles) > self.budget and idle:
            self._free(idle.pop(0))

    def _free(self, key: str) -> None:
        """Free one adapter, first taking every adapter off the context: llama.cpp compares a new set with
        the context's by address, and a later adapter allocated where this one was would otherwise be
        taken for it (the graph built with the freed one's tensors run again)."""
        self.model.use_adapters([])
        self.model.free_adapter(self._handles.pop(key))

    # -- requests ------------------------------------------------------------------------------------
    def check(self, request: GenerationRequest, in_use: Callable[[], Iterable[str]]) -> None:
        """Put the request's adapters in canonical form, as keys, loading those not loaded now;
        InvalidRequestError for one not known. `in_use` is asked only when a budget must be kept."""
        keys: list[tuple[str, float]] = []
        for name, scale in adapter_set(request.adapters):
            if name not in self._known:
                known = ", ".join(self._known) or "none"
                raise InvalidRequestError("lora", f"no LoRA adapter named {name!r} (loaded: {known})")
            keys.append((self._ensure_loaded(name), scale))
        request.adapters = adapter_set(keys)
        if self.budget and len(self._handles) > self.budget:
            self._trim(set(in_use()) | {k for k, _ in keys})

    def _ensure_loaded(self, name: str) -> str:
        """The adapter's key, loading it again if it was freed (under a new key if its file changed)."""
        spec, key = self._known[name]
        if key not in self._handles:
            try:
                key = f"{name}@{fingerprint(spec.path)}"
                self._handles[key] = self.model.load_adapter(spec.path)
            except (ModelLoadError, OSError) as exc:
                message = f"LoRA adapter {name!r} could not be loaded: {exc}"
                raise InvalidRequestError("lora", message) from exc
            self._known[name] = (spec, key)
        self._handles.move_to_end(key)
        return key

    def apply(self, adapters: AdapterSet) -> None:
        """Have the decodes that follow run with `adapters` (nothing to do when none is known)."""
        if self._known:
            self.model.use_adapters([(self._handles[key], scale) for key, scale in adapters])

    def status(self, in_use: Iterable[str]) -> list[AdapterStatus]:
        counts: dict[str, int] = {}
        for key in in_use:
            counts[key] = counts.get(key, 0) + 1
        return [
            AdapterStatus(spec.name, spec.path, spec.scale, key in self._handles, counts.get(key, 0))
            for spec, key in self._known.values()
        ]


def keys_in_use(adapter_sets: Iterable[AdapterSet]) -> list[str]:
    """Each adapter key of these sets, once per set that holds it."""
    return [key for adapters in adapter_sets for key, _ in adapters]
