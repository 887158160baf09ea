"""A GGUF file's structure checked before llama.cpp parses it: header, metadata and tensor table read
with bounds against the file's size, every tensor's data inside the file, and a split model's parts all
there. A file from anyone may be cut short, corrupt or crafted (llama.cpp has had heap overflows on
crafted headers); this refuses it with the file and the reason instead of handing it to C++.

Pure Python over an mmap (no llama.cpp): the endpoint checks a model before any copy loads it.
"""

from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from llmhost.errors import ModelError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
# metadata value types: struct format of the fixed-size ones
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
# a context the model claims beyond this is not a model (llama.cpp keeps it in 32 bits)
MAX_CONTEXT = 2**31 - 1
SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class GGUFError(ModelError, ValueError):
    """The file is not a GGUF llama.cpp could read safely; the message names the file and why."""


@dataclass
class GGUFLayout:
    """What the check read: the metadata (arrays as their length, or as their elements for those of at
    most `read_arrays` elements: see check_file; `arrays` names the keys holding arrays), each tensor's
    shape and type, and where things lie: the metadata's bytes end at `kv_end` (they start after the
    24-byte header), each tensor's data at its absolute offset in `offsets`, with the data aligned to
    `alignment`."""

    path: Path
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    arrays: set[str] = field(default_factory=set)
    tensors: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    kv_end: int = 0
    alignment: int = DEFAULT_ALIGNMENT
    offsets: dict[str, int] = field(default_factory=dict)


class _Reader:
    """Reads little-endian values at a cursor, never past the end of the buffer."""

    def __init__(self, buf: mmap.mmap | bytes, size: int, read_arrays: int | None = None) -> None:
        self.buf, self.size, self.pos = buf, size, 0
        self.read_arrays = read_arrays

    def take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.size:
            raise ValueError(f"{what} at byte {self.pos} runs past the end of the file ({self.size} bytes)")
        start, self.pos = self.pos, self.pos + n
        return start

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<Q", f"{what}'s length")
        start = self.take(n, what)
        return bytes(self.buf[start : start + n]).decode("utf-8", "replace")

    def value(self, kind: int, what: str) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind], what)
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY:
            return self.array(what)
        raise ValueError(f"{what} has unknown value type {kind}")

    def array(self, what: str) -> int | list[Any]:
        """Skips an array (checked element by element for strings), returning its length; one of at most
        `read_arrays` elements is read instead, returning its elements."""
        kind = self.unpack("<I", f"{what}'s element type")
        n = self.unpack("<Q", f"{what}'s length")
        if kind in (*_SCALARS, _STRING) and self.read_arrays is not None and n <= self.read_arrays:
            if n > self.size - self.pos:  # each element takes a byte at least
                raise ValueError(f"{what} claims {n} elements, more than the file holds")
            return [self.value(kind, f"{what}[{i}]") for i in range(n)]
        if kind in _SCALARS:
            self.take(n * struct.calcsize(_SCALARS[kind]), f"{what} ({n} elements)")
        elif kind == _STRING:
            if n * 8 > self.size - self.pos:  # each string holds at least its 8-byte length
                raise ValueError(f"{what} claims {n} strings, more than the file holds")
            self._strings(n, what)
        else:  # nested arrays: no model writes them, and llama.cpp reads none
            raise ValueError(f"{what} is an array of type {kind}")
        return int(n)

    def _strings(self, n: int, what: str) -> None:
        """Walks `n` strings (a vocabulary: 262k of them in Gemma's, hence the tight loop)."""
        pos, size, length = self.pos, self.size, _U64.unpack_from
        for i in range(n):
            if pos + 8 > size:
                raise ValueError(f"{what}[{i}] runs past the end of the file ({size} bytes)")
            pos += 8 + length(self.buf, pos)[0]
            if pos > size:
                raise ValueError(f"{what}[{i}] runs past the end of the file ({size} bytes)")
        self.pos = pos


def _tensor_bytes(name: str, dims: tuple[int, ...], kind: int) -> int:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError):
        raise ValueError(f"tensor {name!r} has unknown type {kind}") from None
    if not dims or any(d <= 0 for d in dims):
        raise ValueError(f"tensor {name!r} has shape {list(dims)}")
    if dims[0] % block:
        raise ValueError(f"tensor {name!r}: {dims[0]} columns, not a multiple of its type's block of {block}")
    n = 1
    for d in dims:
        n *= d
    return n // block * type_size


def _read(r: _Reader, path: Path) -> tuple[GGUFLayout, list[tuple[str, int, int]]]:
    if bytes(r.buf[:4]) != MAGIC:
        raise ValueError("not a GGUF file (no GGUF magic)")
    if r.size < 24:
        raise ValueError(f"cut short: {r.size} bytes, less than a GGUF header")
    r.take(4, "magic")
    version = r.unpack("<I", "version")
    if version not in VERSIONS:
        raise ValueError(f"GGUF version {version} (llama.cpp reads versions {VERSIONS})")
    n_tensors, n_kv = r.unpack("<Q", "tensor count"), r.unpack("<Q", "metadata count")
    if n_kv * 12 > r.size or n_tensors * 24 > r.size:  # each entry takes at least that many bytes
        raise ValueError(
            f"header claims {n_kv} metadata entries and {n_tensors} tensors, more than the file holds"
        )
    layout = GGUFLayout(path, version)
    for i in range(n_kv):
        key = r.string(f"metadata key {i}")
        if key in layout.metadata:
            raise ValueError(f"metadata key {key!r} appears twice")
        kind = r.unpack("<I", f"{key}'s type")
        layout.metadata[key] = r.value(kind, key)
        if kind == _ARRAY:
            layout.arrays.add(key)
    layout.kv_end = r.pos
    extents = []
    for i in range(n_tensors):
        name = r.string(f"tensor {i}'s name")
        n_dims = r.unpack("<I", f"{name}'s dimension count")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ValueError(f"tensor {name!r} has {n_dims} dimensions (at most {MAX_DIMS})")
        dims = tuple(r.unpack("<Q", f"{name}'s shape") for _ in range(n_dims))
        kind, offset = r.unpack("<I", f"{name}'s type"), r.unpack("<Q", f"{name}'s offset")
        if name in layout.tensors:
            raise ValueError(f"tensor {name!r} appears twice")
        layout.tensors[name] = (dims, kind)
        extents.append((name, offset, _tensor_bytes(name, dims, kind)))
    return layout, extents


def _check_data(layout: GGUFLayout, extents: list[tuple[str, int, int]], header_end: int, size: int) -> None:
    """Every tensor's bytes aligned, inside the file and apart from the others."""
    alignment = layout.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"general.alignment {alignment!r} is not a power of two")
    data = -(-header_end // alignment) * alignment
    layout.alignment = alignment
    layout.offsets = {name: data + offset for name, offset, _ in extents}
    end = data
    for name, offset, nbytes in sorted(extents, key=lambda e: e[1]):
        if offset % alignment:
            raise ValueError(f"tensor {name!r}'s data offset {offset} is not aligned to {alignment}")
        if data + offset < end:
            raise ValueError(f"tensor {name!r}'s data overlaps another tensor's")
        end = data + offset + nbytes
        if end > size:
            raise ValueError(
                f"tensor {name!r} ({nbytes} bytes at {data + offset}) lies past the end of the file "
                f"({size} bytes): truncated, or its shape is larger than the file"
            )


def _check_metadata(layout: GGUFLayout) -> None:
    """Claims llama.cpp would size buffers from: the trained context, the vocabulary's size."""
    meta = layout.metadata
    arch = meta.get("general.architecture")
    ctx = meta.get(f"{arch}.context_length")
    if ctx is not None and (not isinstance(ctx, int) or not 0 < ctx <= MAX_CONTEXT):
        raise ValueError(f"{arch}.context_length {ctx!r} is not a context length (1 to {MAX_CONTEXT})")
    n_tokens = meta.get("tokenizer.ggml.tokens")
    embd = layout.tensors.get("token_embd.weight")
    # a token id indexes the embedding: fewer rows than tokens reads past it (more is padding)
    if isinstance(n_tokens, int) and embd is not None and len(embd[0]) > 1 and embd[0][1] < n_tokens:
        raise ValueError(f"vocabulary of {n_tokens} tokens, but token_embd.weight has {embd[0][1]} rows")


def check_file(path: str | Path, read_arrays: int | None = None) -> GGUFLayout:
    """One GGUF file's structure; raises GGUFError naming the file and the reason. With `read_arrays`,
    the metadata arrays of at most that many elements are read (their elements, not their length):
    what a model's description needs, without walking a vocabulary's 262k strings into objects."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            size = path.stat().st_size
            if size == 0:
                raise ValueError("empty file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                reader = _Reader(buf, size, read_arrays)
                layout, extents = _read(reader, path)
                _check_data(layout, extents, reader.pos, size)
                _check_metadata(layout)
                return layout
    except (ValueError, OSError, struct.error) as exc:
        raise GGUFError(f"{path}: {exc}") from None


def check_gguf(path: str | Path) -> list[GGUFLayout]:
    """A model as llama.cpp would load it: the file, and for the first part of a split model
    (`NAME-00001-of-0000N.gguf`, with `split.count` in its metadata) every other part."""
    first = check_file(path)
    count = first.metadata.get("split.count")
    if not isinstance(count, int) or count <= 1:
        return [first]
    match = SPLIT.match(Path(path).name)
    if match is None or int(match["no"]) != 1:
        raise GGUFError(
            f"{path}: part of a split model ({count} parts): load it from its first part, "
            "NAME-00001-of-NNNNN.gguf"
        )
    parts = [first]
    for no in range(2, count + 1):
        part = Path(path).with_name(f"{match['prefix']}-{no:05d}-of-{count:05d}.gguf")
        if not part.is_file():
            raise GGUFError(f"{path}: split model of {count} parts, but part {no} ({part.name}) is missing")
        parts.append(check_file(part))
    declared = first.metadata.get("split.tensors.count")
    found = sum(len(p.tensors) for p in parts)
    if isinstance(declared, int) and declared != found:
        raise GGUFError(f"{path}: split model declares {declared} tensors, its parts hold {found}")
    return parts
