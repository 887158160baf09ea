"""Merge LoRA adapters into their base model: a new GGUF whose adapted weights are W + s·B·A.

The arithmetic is llama.cpp's (`export-lora`, and `build_lora_mm` when an adapter is applied at run
time): for a weight W (ggml shape [n_in, n_out]) with `.lora_a` A ([n_in, rank]) and `.lora_b`
B ([rank, n_out]), the update is s·B·A with s = scale·alpha/rank (scale alone when the adapter
records no alpha), rank = B's ne[0]. The token embedding is the one weight stored the other way
round (A [rank, n_vocab], B [rank, n_embd]; llama.cpp looks rows of A up): its update is A·Bᵀ.

The output copies the base's metadata and every weight no adapter touches byte for byte (a Q4_K
weight stays that Q4_K); a merged weight is F16 (or F32 if asked), F32 where the base's was F32, as
export-lora writes them. The file is read and written tensor by tensor, and a merged weight a block of rows at
a time, so memory stays at a few tens of MB whatever the model's size.
"""

from __future__ import annotations

import math
import os
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from llmhost.engine.llamacpp.gguf_check import GGUFError, GGUFLayout, check_file
from llmhost.engine.llamacpp.lora_fit import TOKEN_EMBD as _TOKEN_EMBD
from llmhost.engine.llamacpp.lora_fit import AdapterFitError, BaseShape, check_adapter
from llmhost.errors import ModelError

F32, F16 = GGMLQuantizationType.F32, GGMLQuantizationType.F16
MERGED_TYPES = ("f16", "f32")
# float32 values of a block of rows processed at once, bytes of a copied weight read at once (16 MiB)
_BLOCK_VALUES = 1 << 22
_COPY_BYTES = 1 << 24
_F16_MAX = float(np.finfo(np.float16).max)

Progress = Callable[[int, int, str], None]
Matrix = npt.NDArray[np.float32]


class MergeError(ModelError, ValueError):
    """An adapter cannot be merged into the base; the message names the file and why."""


@dataclass(slots=True, frozen=True)
class Adapter:
    """One adapter to merge, checked against the base: its pairs by base weight name."""

    path: Path
    scale: float
    alpha: float
    layout: GGUFLayout

    def factor(self, weight: str) -> float:
        """s of s·B·A for `weight`: llama.cpp's scale·alpha/rank, or the scale without an alpha."""
        rank = self.layout.tensors[weight + ".lora_b"][0][0]
        return self.scale * self.alpha / rank if self.alpha else self.scale

    @property
    def weights(self) -> set[str]:
        return {name.removesuffix(".lora_a") for name in self.layout.tensors if name.endswith(".lora_a")}


@dataclass(slots=True, frozen=True)
class MergeResult:
    path: Path
    merged: tuple[str, ...]  # the base weights updated
    seconds: float
    out_bytes: int


@dataclass(slots=True, frozen=True)
class Source:
    """A GGUF read by offset (pread, not mmap: what is read once does not stay in this process's
    memory, so its RSS measures the merge's own buffers)."""

    path: Path
    fd: int

    def read(self, offset: int, nbytes: int) -> bytes:
        data = os.pread(self.fd, nbytes, offset)
        if len(data) != nbytes:
            raise MergeError(f"{self.path}: {nbytes} bytes at {offset} could not be read (file changed?)")
        return data


def _layout(path: Path, what: str) -> GGUFLayout:
    try:
        return check_file(path)
    except GGUFError as exc:
        raise MergeError(f"{what}: {exc}") from None


def load_adapter(path: Path, scale: float, base: GGUFLayout) -> Adapter:
    """The adapter at `path`, refused (MergeError naming it) unless llama.cpp would apply it to `base`
    (`lora_fit.check_adapter`: the check a server and an endpoint make too)."""
    if not math.isfinite(scale):
        raise MergeError(f"adapter {path}: scale must be a finite number, got {scale}")
    try:
        layout = check_adapter(path, BaseShape.of([base]))
    except AdapterFitError as exc:
        raise MergeError(str(exc)) from None
    alpha = layout.metadata.get("adapter.lora.alpha", 0.0)
    return Adapter(path, float(scale), float(alpha), layout)


def _values(buf: Source, layout: GGUFLayout, name: str, rows: slice | None = None) -> Matrix:
    """Tensor `name` (2-D) as float32, numpy shape (ne[1], ne[0]); only `rows` of it if given."""
    (n_cols, n_rows), kind = layout.tensors[name][0], GGMLQuantizationType(layout.tensors[name][1])
    block, type_size = GGML_QUANT_SIZES[kind]
    row_bytes = n_cols // block * type_size
    first, stop = (rows.start, rows.stop) if rows is not None else (0, n_rows)
    start = layout.offsets[name] + first * row_bytes
    data = buf.read(start, (stop - first) * row_bytes)
    raw = np.frombuffer(data, np.uint8).reshape(stop - first, row_bytes)
    if kind in (F32, F16):
        return np.array(raw.view(np.float32 if kind == F32 else np.float16), dtype=np.float32)
    values: Matrix = dequantize(raw, kind).astype(np.float32, copy=False)
    return values.reshape(stop - first, n_cols)


Opened = Sequence[tuple[Adapter, Source]]


def _updates(weight: str, adapters: Opened) -> list[tuple[Matrix, Matrix]]:
    """(A, s·B) of each adapter updating `weight`, in float32: B, the smaller, scaled once (llama.cpp
    scales s·(B·A): the same up to float32 rounding)."""
    return [
        (
            _values(buf, a.layout, f"{weight}.lora_a"),
            np.float32(a.factor(weight)) * _values(buf, a.layout, f"{weight}.lora_b"),
        )
        for a, buf in adapters
        if weight in a.weights
    ]


def _merged_rows(weight: str, base: tuple[Source, GGUFLayout], adapters: Opened) -> Iterator[Matrix]:
    """The merged weight, a block of rows at a time (float32, numpy order)."""
    n_cols, n_rows = base[1].tensors[weight][0]
    pairs = _updates(weight, adapters)
    step = max(1, _BLOCK_VALUES // n_cols)
    for first in range(0, n_rows, step):
        rows = slice(first, min(first + step, n_rows))
        w = _values(*base, weight, rows)
        for a, b in pairs:
            # numpy order: A (rank, n_in), B (n_out, rank); the embedding's A (n_vocab, rank),
            # B (n_embd, rank)
            w += a[rows] @ b.T if weight == _TOKEN_EMBD else b[rows] @ a
        yield w


def _write_merged(out: BinaryIO, weight: str, kind: GGMLQuantizationType, blocks: Iterator[Matrix]) -> None:
    for w in blocks:
        if kind == F16 and not np.all(np.abs(w) <= _F16_MAX):
            raise MergeError(f"merged {weight!r} has values beyond F16's range (or not finite)")
        out.write(w.astype(np.float16 if kind == F16 else np.float32).tobytes())


def _pad(out: BinaryIO, alignment: int) -> None:
    out.write(b"\0" * (-out.tell() % alignment))


Types = dict[str, GGMLQuantizationType]


def _write_header(out: BinaryIO, buf: Source, base: GGUFLayout, types: Types) -> None:
    """The base's header and metadata as they are, then its tensor table with `types` and the offsets
    those give, each tensor's data aligned as the base's."""
    out.write(buf.read(0, base.kv_end))
    offset = 0
    for name, (dims, _) in base.tensors.items():
        encoded = name.encode()
        out.write(struct.pack("<Q", len(encoded)) + encoded + struct.pack("<I", len(dims)))
        out.write(struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", types[name], offset))
        offset += -(-tensor_bytes(dims, types[name]) // base.alignment) * base.alignment


def _copy(out: BinaryIO, buf: Source, start: int, nbytes: int) -> None:
    for at in range(start, start + nbytes, _COPY_BYTES):
        out.write(buf.read(at, min(_COPY_BYTES, start + nbytes - at)))


def _write(
    out: BinaryIO,
    buf: Source,
    base: GGUFLayout,
    adapters: Opened,
    merged_type: str,
    progress: Progress | None,
) -> list[str]:
    """The whole merged file, returning the names of the weights updated."""
    targets = set().union(*(a.weights for a, _ in adapters))
    floor = F32 if merged_type == "f32" else F16
    types = {
        n: (F32 if k == F32 else floor) if n in targets else GGMLQuantizationType(k)
        for n, (_, k) in base.tensors.items()
    }
    _write_header(out, buf, base, types)
    for i, (name, (dims, kind)) in enumerate(base.tensors.items()):
        _pad(out, base.alignment)
        if name in targets:
            _write_merged(out, name, types[name], _merged_rows(name, (buf, base), adapters))
        else:
            _copy(out, buf, base.offsets[name], tensor_bytes(dims, kind))
        if progress is not None:
            progress(i + 1, len(base.tensors), name)
    return sorted(targets)


def tensor_bytes(dims: tuple[int, ...], kind: int) -> int:
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    return math.prod(dims) // block * type_size


def merge_lora(
    base_path: str | Path,
    adapters: Sequence[tuple[str | Path, float]],
    out_path: str | Path,
    merged_type: str = "f16",
    progress: Progress | None = None,
) -> MergeResult:
    """Write `out_path`: the GGUF `base_path` with each (adapter GGUF, scale) of `adapters` merged in,
    in order, the merged weights as `merged_type` (f16, or f32; an F32 weight stays F32). Every
    adapter is checked before anything is written; `progress(done, total, tensor)`."""
    base_path, out_path = Path(base_path), Path(out_path)
    if not adapters:
        raise MergeError("no adapter to merge")
    if merged_type not in MERGED_TYPES:
        raise MergeError(
            f"merged weights' type must be one of {', '.join(MERGED_TYPES)}, got {merged_type!r}"
        )
    base = _layout(base_path, "base model")
    if base.metadata.get("general.type") == "adapter":
        raise MergeError(f"the base {base_path} is itself an adapter, not a model")
    loaded = [load_adapter(Path(p), float(s), base) for p, s in adapters]
    if out_path.resolve() in {base_path.resolve(), *(a.path.resolve() for a in loaded)}:
        raise MergeError(f"the output {out_path} must not overwrite an input")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    t0 = time.perf_counter()
    try:
        with ExitStack() as stack:
            maps = [stack.enter_context(_opened(p)) for p in (base_path, *(a.path for a in loaded))]
            out = stack.enter_context(partial.open("wb"))
            mapped = list(zip(loaded, maps[1:], strict=True))
            merged = _write(out, maps[0], base, mapped, merged_type, progress)
        partial.replace(out_path)
    finally:
        partial.unlink(missing_ok=True)
    return MergeResult(out_path, tuple(merged), time.perf_counter() - t0, out_path.stat().st_size)


@contextmanager
def _opened(path: Path) -> Iterator[Source]:
    """The file open for reading by offset for the `with` block."""
    with path.open("rb") as f:
        yield Source(path, f.fileno())
