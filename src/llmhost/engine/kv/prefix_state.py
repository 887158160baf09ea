"""A saved prefix KV state on disk: the prompt tokens and llama.cpp's sequence state for them.

Layout: magic, little-endian u32 token count, the tokens as int32, then the state bytes of
`llama_state_seq_get_data`. Whether the state fits a model is decided by its owner (an artifact's
key); llama.cpp itself only checks shapes.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from llmhost.errors import ModelError

MAGIC = b"LLMHKV01"


class PrefixStateError(ModelError, ValueError):
    """The file is not a prefix state."""


def save_prefix_state(path: str | Path, tokens: list[int], state: bytes) -> None:
    body = MAGIC + struct.pack("<I", len(tokens)) + np.asarray(tokens, dtype="<i4").tobytes() + state
    Path(path).write_bytes(body)


def load_prefix_state(path: str | Path) -> tuple[list[int], bytes]:
    data = Path(path).read_bytes()
    head = len(MAGIC) + 4
    if len(data) < head or not data.startswith(MAGIC):
        raise PrefixStateError(f"{path} is not a prefix state file")
    (n,) = struct.unpack("<I", data[len(MAGIC) : head])
    end = head + 4 * n
    if len(data) <= end:
        raise PrefixStateError(f"{path} is truncated")
    tokens = np.frombuffer(data[head:end], dtype="<i4").astype(int).tolist()
    return tokens, data[end:]
