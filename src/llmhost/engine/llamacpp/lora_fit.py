"""Whether a LoRA adapter GGUF fits a base model, read from the two files' headers and tensor tables
only (no weight is read, no model loaded): the one check `llmhost optimize merge-lora`, a server's
adapter load and the endpoint (before any copy has the base loaded) all make.

It is llama.cpp's own check (llama_adapter_lora_init): the file is a LoRA adapter (`general.type`
adapter, `adapter.type` lora), of the base's architecture, every `.lora_a` has its `.lora_b`, each
adapts a weight the base has, and the pair's shapes fit that weight (A [n_in, rank], B [rank, n_out];
the token embedding's the other way round, A [rank, n_vocab], B [rank, n_embd]).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llmhost.engine.llamacpp.gguf_check import GGUFError, GGUFLayout, check_file, check_gguf
from llmhost.errors import ModelError

SUFFIXES = (".lora_a", ".lora_b")
TOKEN_EMBD = "token_embd.weight"


class AdapterFitError(ModelError, ValueError):
    """The adapter is not one llama.cpp would apply to the base; the message names the file and why."""


@dataclass(frozen=True, slots=True)
class BaseShape:
    """What of a base model an adapter must fit: its architecture and every weight's shape (over all
    the parts of a split model)."""

    path: Path
    architecture: object
    shapes: dict[str, tuple[int, ...]]

    @classmethod
    def of(cls, parts: Sequence[GGUFLayout]) -> BaseShape:
        shapes = {name: dims for p in parts for name, (dims, _) in p.tensors.items()}
        return cls(parts[0].path, parts[0].metadata.get("general.architecture"), shapes)


def base_shape(path: str | Path) -> BaseShape:
    """The base model's shape from its header(s); AdapterFitError when it is no model llama.cpp reads."""
    try:
        parts = check_gguf(path)
    except GGUFError as exc:
        raise AdapterFitError(f"base model: {exc}") from None
    if parts[0].metadata.get("general.type") == "adapter":
        raise AdapterFitError(f"the base {path} is itself an adapter, not a model")
    return BaseShape.of(parts)


def _kind(path: Path, layout: GGUFLayout) -> None:
    meta = layout.metadata
    kind = (meta.get("general.type"), meta.get("adapter.type"))
    if kind != ("adapter", "lora"):
        raise AdapterFitError(
            f"{path} is not a LoRA adapter (general.type {kind[0]!r}, adapter.type {kind[1]!r}; "
            "want 'adapter' and 'lora')"
        )
    alpha = meta.get("adapter.lora.alpha", 0.0)
    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise AdapterFitError(f"adapter {path}: adapter.lora.alpha {alpha!r} is not a number")


def _pairs(path: Path, layout: GGUFLayout) -> None:
    for name in layout.tensors:
        if not name.endswith(SUFFIXES):
            raise AdapterFitError(f"adapter {path}: tensor {name!r} is neither a .lora_a nor a .lora_b")
        stem, _, suffix = name.rpartition(".")
        other = "lora_b" if suffix == "lora_a" else "lora_a"
        if f"{stem}.{other}" not in layout.tensors:
            raise AdapterFitError(f"adapter {path}: {name!r} has no {other} beside it")


def _shapes(path: Path, adapter: GGUFLayout, base: BaseShape) -> None:
    for weight in sorted(n.removesuffix(".lora_a") for n in adapter.tensors if n.endswith(".lora_a")):
        if weight not in base.shapes:
            raise AdapterFitError(
                f"adapter {path} adapts {weight!r}, which the base {base.path} does not have"
            )
        dims = base.shapes[weight]
        a, b = adapter.tensors[weight + ".lora_a"][0], adapter.tensors[weight + ".lora_b"][0]
        if len(dims) != 2 or len(a) != 2 or len(b) != 2:
            raise AdapterFitError(f"adapter {path}: {weight!r} is not a matrix update (shapes {a}, {b})")
        if weight == TOKEN_EMBD:
            ok = dims[0] == b[1] and dims[1] == a[1] and a[0] == b[0]
        else:
            ok = dims[0] == a[0] and dims[1] == b[1] and a[1] == b[0]
        if not ok:
            raise AdapterFitError(
                f"adapter {path}: {weight!r} has lora_a {list(a)} and lora_b {list(b)}, which do not fit "
                f"the base's {list(dims)} in {base.path} (an adapter for another model?)"
            )


def check_adapter(path: str | Path, base: BaseShape) -> GGUFLayout:
    """The adapter's layout, once it is checked to fit `base`; AdapterFitError naming the file if not."""
    path = Path(path)
    try:
        layout = check_file(path)
    except GGUFError as exc:
        raise AdapterFitError(f"adapter: {exc}") from None
    _kind(path, layout)
    arch = layout.metadata.get("general.architecture")
    if arch != base.architecture:
        raise AdapterFitError(
            f"adapter {path} is for {arch!r}, the base {base.path} is {base.architecture!r}"
        )
    _pairs(path, layout)
    _shapes(path, layout, base)
    return layout
