"""Hostile GGUF files for tests: a small valid one written with the `gguf` package, and byte edits of it
(a header, a metadata entry or a tensor's shape rewritten in place, the file cut short)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

N_EMBD = 32


def write_gguf(path: Path, tokens: int = 3, rows: int | None = None, **kv: Any) -> Path:
    """A GGUF holding a vocabulary of `tokens`, a token embedding of `rows` rows (default: one a token)
    and a norm; `kv` adds metadata (int: u32, str: string)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_token_list([f"t{i}" for i in range(tokens)])
    for key, value in kv.items():
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, value)
    w.add_tensor("token_embd.weight", np.zeros((rows or tokens, N_EMBD), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones((N_EMBD,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def edit(path: Path, offset: int, fmt: str, value: Any) -> Path:
    """Overwrite one value at `offset` in place."""
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    path.write_bytes(bytes(data))
    return path


def after(path: Path, marker: bytes) -> int:
    """The offset just past the first occurrence of `marker` (a key's or a tensor's name)."""
    at = path.read_bytes().index(marker)
    return at + len(marker)


def truncate(src: Path, dst: Path, keep: float) -> Path:
    """A copy of `src` cut to `keep` of its size (a download cut short)."""
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])
    return dst


def set_string(path: Path, key: bytes, text: str) -> Path:
    """Replace a string value of the same or shorter length in place, padding with spaces (a chat
    template rewritten inside a real model)."""
    data = bytearray(path.read_bytes())
    at = data.index(key) + len(key) + 4  # past the value type
    (length,) = struct.unpack_from("<Q", data, at)
    raw = text.encode()
    if len(raw) > length:
        raise ValueError(f"{len(raw)} bytes do not fit the {length} of {key!r}")
    data[at + 8 : at + 8 + length] = raw + b" " * (length - len(raw))
    path.write_bytes(bytes(data))
    return path
