"""llama.cpp's saved sequence state, re-laid for a context with another number of KV streams.

`llama_state_seq_get_data` writes, after its magic and the sequence id, each KV cache's part (one, or
two for a sliding-window model): the cache's stream count, then per stream a cell count and, for a
stream holding cells, their positions and sequence ids, then K and V rows per layer. Loading checks the
stream count against the context's, though a sequence's cells come from one stream and go to the
target sequence's whatever its number. So a state saved with one stream (an optimize artifact's) loads
into a server of sixteen once each part is given sixteen counts, the one stream's block among them.
A sliding-window state read for a checkpoint holds every cell the cache still has for the sequence (the
window and up to a micro-batch more): `keep_from` drops those a restore does not need.
Only plain KV caches are known here (not recurrent states, nor M-RoPE cells with extra fields).
"""

from __future__ import annotations

import struct

import numpy as np

_HEADER = 8  # magic u32, sequence id i32
_U32 = struct.Struct("<I")


def n_streams(state: bytes) -> int | None:
    """The stream count of the state's first KV part (None: too short to say)."""
    if len(state) < _HEADER + 4:
        return None
    return int(_U32.unpack_from(state, _HEADER)[0])


def restream(state: bytes, n_stream: int) -> bytes | None:
    """`state` with every KV part laid out for `n_stream` streams; None if it cannot be read as a
    plain KV state or holds more non-empty streams than that."""
    out = [state[:_HEADER]]
    pos = _HEADER
    try:
        while pos < len(state):
            blocks, pos = _read_part(state, pos)
            if len(blocks) > n_stream:
                return None
            out += [_U32.pack(n_stream), *blocks, _U32.pack(0) * (n_stream - len(blocks))]
    except (struct.error, ValueError):
        return None
    return b"".join(out) if pos == len(state) and len(out) > 1 else None


def _read_part(state: bytes, pos: int) -> tuple[list[bytes], int]:
    """One KV cache's streams: the blocks (cell count + cells) of those holding cells, and the offset
    after the part."""
    (count,) = _U32.unpack_from(state, pos)
    pos += 4
    blocks: list[bytes] = []
    for _ in range(count):
        start = pos
        (cells,) = _U32.unpack_from(state, pos)
        pos += 4
        if cells:
            pos = _skip_data(state, _skip_meta(state, pos, cells), cells)
            blocks.append(state[start:pos])
    return blocks, pos


def _skip_meta(state: bytes, pos: int, cells: int) -> int:
    """Past each cell's position (i32), sequence id count (u32) and those ids (i32)."""
    for _ in range(cells):
        (n_seq,) = _U32.unpack_from(state, pos + 4)
        pos += 8 + 4 * n_seq
    return pos


def _skip_data(state: bytes, pos: int, cells: int) -> int:
    """Past the K rows of every layer, then the V rows (row-major, or transposed: per element)."""
    v_trans, n_layer = struct.unpack_from("<II", state, pos)
    pos += 8
    for _ in range(n_layer):
        (row,) = struct.unpack_from("<Q", state, pos + 4)
        pos += 12 + cells * row
    for _ in range(n_layer):
        if v_trans:
            size_el, n_embd = struct.unpack_from("<II", state, pos + 4)
            pos += 12 + n_embd * cells * size_el
        else:
            (row,) = struct.unpack_from("<Q", state, pos + 4)
            pos += 12 + cells * row
    if pos > len(state):
        raise ValueError("state ends inside its rows")
    return pos


def keep_from(state: bytes, first: int) -> bytes | None:
    """`state` with only its cells at positions `first` and above (each stream's metadata and K and V
    rows cut alike); None if it cannot be read as a plain KV state."""
    out = [state[:_HEADER]]
    pos = _HEADER
    try:
        while pos < len(state):
            (count,) = _U32.unpack_from(state, pos)
            out.append(state[pos : pos + 4])
            pos += 4
            for _ in range(count):
                block, pos = _keep_block(state, pos, first)
                out.append(block)
    except (struct.error, ValueError):
        return None
    return b"".join(out) if pos == len(state) and len(out) > 1 else None


def _keep_block(state: bytes, pos: int, first: int) -> tuple[bytes, int]:
    """One stream's block with only the cells at `first` and above, and the offset after it."""
    (cells,) = _U32.unpack_from(state, pos)
    pos += 4
    if not cells:
        return _U32.pack(0), pos
    metas: list[bytes] = []
    keep: list[int] = []
    for i in range(cells):
        (cell_pos, n_seq) = struct.unpack_from("<iI", state, pos)
        end = pos + 8 + 4 * n_seq
        if cell_pos >= first:
            metas.append(state[pos:end])
            keep.append(i)
        pos = end
    v_trans, n_layer = struct.unpack_from("<II", state, pos)
    rows = [state[pos : pos + 8]]
    pos += 8
    for layer in range(2 * n_layer):
        if v_trans and layer >= n_layer:  # V transposed: per element, each cell's value
            size_el, n_embd = struct.unpack_from("<II", state, pos + 4)
            shape, head = (n_embd, cells, size_el), 12
        else:
            (row,) = struct.unpack_from("<Q", state, pos + 4)
            shape, head = (1, cells, row), 12
        size = shape[0] * shape[1] * shape[2]
        if pos + head + size > len(state):
            raise ValueError("state ends inside its rows")
        data = np.frombuffer(state, np.uint8, size, pos + head).reshape(shape)
        rows += [state[pos : pos + head], data[:, keep].tobytes()]
        pos += head + size
    if not keep:  # llama.cpp reads no rows after a count of 0
        return _U32.pack(0), pos
    return b"".join([_U32.pack(len(keep)), *metas, *rows]), pos
