"""A sequence's KV state as bytes, read from and written to a llama.cpp context: all of it (the host
cache tier, saved prefix files) or only its sliding-window layers (`swa_only`: SWA checkpoints)."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp as lc


def _flags(swa_only: bool) -> int:
    return int(lc.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY) if swa_only else 0


def state_size(ctx: Any, seq_id: int, swa_only: bool = False) -> int:
    return int(lc.llama_state_seq_get_size_ext(ctx, seq_id, _flags(swa_only)))


def read_state(ctx: Any, seq_id: int, swa_only: bool = False) -> bytes:
    """`seq_id`'s state (llama_state_seq_get_data_ext); RuntimeError where llama.cpp writes none."""
    size = state_size(ctx, seq_id, swa_only)
    buf = (ctypes.c_uint8 * size)()
    n = int(lc.llama_state_seq_get_data_ext(ctx, buf, size, seq_id, _flags(swa_only)))
    if n == 0:
        raise RuntimeError(f"llama_state_seq_get_data_ext failed for sequence {seq_id}")
    return ctypes.string_at(buf, n)  # one copy: bytes(buf)[:n] made two (7-15 ms for 10 MiB)


def write_state(ctx: Any, seq_id: int, data: bytes, swa_only: bool = False) -> bool:
    """Load a state into `seq_id` (its cells in the caches written replaced); False if refused."""
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    return int(lc.llama_state_seq_set_data_ext(ctx, buf, len(data), seq_id, _flags(swa_only))) != 0
