"""Which files of a folder or a Hub repository are models: the naming rules every way of finding a GGUF
shares. A split GGUF (`NAME-00001-of-00003.gguf`, llama.cpp's gguf-split names) is one model, loaded from
its first part (llama.cpp opens the other parts beside it); a multimodal projector (`mmproj` in its
name) is never a model; a quantization type is matched in a file's name as llama-server's `-hf` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
# what a model is looked for when a reference names no quantization type (llama-server's `-hf` default)
DEFAULT_QUANT = "Q4_K_M"


@dataclass(frozen=True, slots=True)
class GgufModel:
    """One model among GGUF file names: a single file, or every part of a split one."""

    first: str  # the file llama.cpp loads: the model itself, or part 1 of a split one
    parts: tuple[str, ...]  # every file the model needs (the first among them)
    missing: tuple[str, ...] = ()  # parts of a split model that are not there

    @property
    def label(self) -> str:
        if len(self.parts) == 1 and not self.missing:
            return self.first
        return f"{self.first} (+{len(self.parts) + len(self.missing) - 1} parts)"


def is_gguf(name: str) -> bool:
    return name.lower().endswith(".gguf")


def is_mmproj(name: str) -> bool:
    """A multimodal projector (`mmproj-…gguf`, `…-mmproj-f16.gguf`): loaded beside a model, never as one."""
    return "mmproj" in PurePosixPath(name).name.lower()


def is_projector_file(name: str) -> bool:
    """A multimodal projector's GGUF (what is found with a model and loaded as its --mmproj)."""
    return is_gguf(name) and is_mmproj(name)


def model_stem(name: str) -> str:
    """A model file's name without `.gguf` and without a split part's `-00001-of-00003`."""
    m = SPLIT.match(name)
    return m["prefix"] if m else name.removesuffix(".gguf").removesuffix(".GGUF")


def part_name(prefix: str, no: int, count: int) -> str:
    return f"{prefix}-{no:05d}-of-{count:05d}.gguf"


def group_models(names: Iterable[str]) -> list[GgufModel]:
    """The models among `names` (relative paths): mmproj files and non-GGUFs left out, each split
    model's parts gathered under its first part, sorted by that first part."""
    singles: list[GgufModel] = []
    splits: dict[tuple[str, int], set[int]] = {}
    for name in names:
        if not is_gguf(name) or is_mmproj(name):
            continue
        m = SPLIT.match(name)
        if m is None:
            singles.append(GgufModel(name, (name,)))
        else:
            splits.setdefault((m["prefix"], int(m["count"])), set()).add(int(m["no"]))
    for (prefix, count), present in splits.items():
        every = [part_name(prefix, no, count) for no in range(1, count + 1)]
        have = tuple(n for i, n in enumerate(every, 1) if i in present)
        missing = tuple(n for i, n in enumerate(every, 1) if i not in present)
        singles.append(GgufModel(every[0], have, missing))
    return sorted(singles, key=lambda m: m.first)


def model_of(name: str, models: Iterable[GgufModel]) -> GgufModel | None:
    """The model `name` is (a single file) or is a part of (any part of a split model)."""
    return next((m for m in models if name == m.first or name in m.parts), None)


def matches_quant(model: GgufModel, quant: str) -> bool:
    """`quant` (any case) stands in the model's name between separators: `Q4_K_M` matches
    `m-Q4_K_M.gguf`, `m.q4_k_m-00001-of-00002.gguf` and `Q4_K_M/m.gguf`, not `m-Q4_K_M_L.gguf` or
    `m-IQ4_K_M.gguf`."""
    stem = model_stem(model.first)
    return re.search(rf"(?:^|[-._/]){re.escape(quant)}(?:$|[-./])", stem, re.IGNORECASE) is not None


def pick_quant(models: list[GgufModel], quant: str | None) -> tuple[GgufModel | None, list[GgufModel]]:
    """The model a quantization type names, and the candidates when it names none or several.

    No type: the `DEFAULT_QUANT` one, else the only model. Returns (model, []) or (None, the choices)."""
    if quant is None:
        chosen, _ = pick_quant(models, DEFAULT_QUANT)
        if chosen is not None:
            return chosen, []
        return (models[0], []) if len(models) == 1 else (None, models)
    hits = [m for m in models if matches_quant(m, quant)]
    return (hits[0], []) if len(hits) == 1 else (None, hits or models)
