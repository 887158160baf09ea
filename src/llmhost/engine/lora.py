"""LoRA adapters as plain data: what `--lora` names, and the adapter set a request runs with.

llama.cpp applies adapters to a whole context (`llama_set_adapters_lora`), not per sequence, so one
decode call runs one adapter set: the scheduler groups a step's sequences by their `AdapterSet`, and
KV computed under one set (in the context or saved in host memory) is never served to another.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# (adapter name, scale) pairs, sorted by name, no zero scale: () is the base model
AdapterSet = tuple[tuple[str, float], ...]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


@dataclass(slots=True, frozen=True)
class AdapterSpec:
    """An adapter to load: its name (what requests select it by), its GGUF, and the scale a request
    selecting it by name gets."""

    name: str
    path: str
    scale: float = 1.0

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"adapter name {self.name!r}: letters, digits and . _ / - only")
        if not self.path:
            raise ValueError(f"adapter {self.name}: no path")
        if not math.isfinite(self.scale):
            raise ValueError(f"adapter {self.name}: scale must be a finite number, got {self.scale}")


def parse_lora(text: str) -> tuple[str, str, float]:
    """`NAME=PATH[:SCALE]` as (name, model reference, scale); SCALE is what follows the last colon
    when that is a number (so `s3://bucket/a.gguf` keeps its colon)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--lora {text!r}: expected NAME=PATH[:SCALE]")
    return (name, *parse_scaled(rest))


def parse_scaled(text: str) -> tuple[str, float]:
    """`PATH[:SCALE]` as (model reference, scale), SCALE read as in `parse_lora`."""
    ref, colon, tail = text.rpartition(":")
    if colon and ref:
        try:
            return ref, float(tail)
        except ValueError:
            pass
    return text, 1.0


def check_unique(specs: tuple[AdapterSpec, ...]) -> None:
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"adapter names must be unique: {', '.join(dup)} given twice")


def adapter_set(pairs: list[tuple[str, float]] | tuple[tuple[str, float], ...]) -> AdapterSet:
    """The canonical set of (name, scale) pairs: sorted, zero scales dropped (they change nothing)."""
    return tuple(sorted((name, float(scale)) for name, scale in pairs if scale != 0.0))


def label(adapters: AdapterSet) -> str:
    """The set as text ("" for the base model): part of a saved KV state's key."""
    return ",".join(f"{name}*{scale!r}" for name, scale in adapters)


def next_turn(sets: set[AdapterSet], last: AdapterSet | None) -> AdapterSet:
    """Of the adapter sets with work, the one whose turn it is after `last`: a fixed (sorted) order,
    cyclic, so each set waits at most one step per other set."""
    ordered = sorted(sets)
    if not ordered:
        return ()
    after = [a for a in ordered if last is not None and a > last]
    return after[0] if after else ordered[0]
