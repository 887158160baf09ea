"""A LoRA adapter checked against its base at the endpoint, before any copy is asked to load it: when
it is added at run time (`POST /admin/components`, `/admin/adapters/load`) or named in the endpoint
file, whether or not the base has a copy running. Only the two files' headers and tensor tables are
read (`engine.llamacpp.lora_fit`, the check `llmhost optimize merge-lora` and a copy's load make too): the
router never loads a model.

The base's file is always local here: a component's model is resolved (an s3:// one downloaded) when
the component is added, before an adapter can name it as its base. An adapter given as s3:// or hf://
is resolved here first (downloaded into the store's cache, which the copies then read from).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.endpoint.control_errors import CopyRefusal, ModelRefError
from llmhost.engine.llamacpp.lora_fit import BaseShape, base_shape, check_adapter
from llmhost.errors import ModelError
from llmhost.store import ModelNotFoundError, resolve


@functools.lru_cache(maxsize=16)
def _base(path: str, mtime_ns: int, size: int) -> BaseShape:
    """The base's shape, read once per file version (0.03 CPU-s for the default model's header)."""
    return base_shape(path)


def check_fit(base: Path, ref: str) -> None:
    """Refuses the adapter `ref` unless it fits the model `base`: ModelNotFoundError when `ref` names
    nothing, `lora_fit.AdapterFitError` (a ValueError naming the file and why) when it does not fit."""
    path = resolve(ref).gguf
    st = os.stat(base)
    check_adapter(path, _base(str(base), st.st_mtime_ns, st.st_size))


def fit_refusal(name: str, ref: str, base: Path, field: str) -> CopyRefusal | None:
    """None when the adapter fits, else the refusal a copy would answer (404 for a reference naming
    nothing, 422 otherwise), its field `field`."""
    try:
        check_fit(base, ref)
    except ModelNotFoundError as exc:
        return CopyRefusal(exc.status, f"LoRA adapter {name!r}: {exc}", field)
    except ValueError as exc:  # lora_fit's refusal, a GGUF unreadable, or a reference malformed
        return CopyRefusal(ModelError.status, f"LoRA adapter {name!r}: {exc}", field)
    return None


def check_adapters(component: str, adapters: list[AdapterEntry], base: Path) -> None:
    """A component's adapters (the file's `adapters:` and adapter components) against its model;
    ModelRefError names the component and the adapter's field."""
    for i, a in enumerate(adapters):
        refused = fit_refusal(a.name, a.path, base, "path")
        if refused is not None:
            raise ModelRefError(component, f"component {component!r}: {refused}", f"adapters[{i}].path")
