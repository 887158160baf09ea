import struct

from llmhost.engine.llamacpp.state_format import keep_from, n_streams, restream

HEADER = struct.pack("<Ii", 0x67676C61, 5)


def block(cells: int, v_trans: bool = False) -> bytes:
    """A stream holding `cells` cells of sequence 5: metadata, then K and V rows of one layer."""
    meta = b"".join(struct.pack("<iIi", pos, 1, 5) for pos in range(cells))
    k = struct.pack("<iQ", 1, 4) + b"k" * 4 * cells
    if v_trans:
        v = struct.pack("<iII", 1, 2, 3) + b"v" * 2 * 3 * cells
    else:
        v = struct.pack("<iQ", 1, 4) + b"v" * 4 * cells
    return struct.pack("<I", cells) + meta + struct.pack("<II", int(v_trans), 1) + k + v


def part(n_stream: int, at: int, body: bytes) -> bytes:
    """One KV cache's streams, `body` in stream `at`, the others empty."""
    empty = struct.pack("<I", 0)
    return struct.pack("<I", n_stream) + empty * at + body + empty * (n_stream - at - 1)


def test_a_one_stream_state_is_laid_out_for_more_streams_part_by_part() -> None:
    base, swa = block(3), block(2, v_trans=True)
    state = HEADER + part(1, 0, base) + part(1, 0, swa)
    assert n_streams(state) == 1
    wider = restream(state, 3)
    assert wider == HEADER + part(3, 0, base) + part(3, 0, swa)
    assert n_streams(wider) == 3


def test_a_state_of_many_streams_narrows_to_one() -> None:
    state = HEADER + part(4, 2, block(2))
    assert restream(state, 1) == HEADER + part(1, 0, block(2))


def test_what_cannot_be_read_is_refused() -> None:
    state = HEADER + part(1, 0, block(3))
    assert restream(state[:-1], 2) is None, "truncated"
    assert restream(state + b"x", 2) is None, "trailing bytes"
    assert restream(HEADER, 2) is None, "no KV part"
    two = HEADER + struct.pack("<I", 2) + block(1) + block(1)
    assert restream(two, 1) is None, "two streams with cells do not fit one"
    assert n_streams(b"short") is None


def positioned(first: int, cells: int, v_trans: bool = False) -> bytes:
    """A stream holding positions first .. first + cells - 1 of sequence 5, each cell's K and V rows
    (or V values, transposed) its position's byte, over two layers."""
    meta = b"".join(struct.pack("<iIi", first + i, 1, 5) for i in range(cells))
    ks = bytes(first + i for i in range(cells))
    k = struct.pack("<iQ", 1, 2) + bytes(b for c in ks for b in (c, c))
    if v_trans:  # 3 elements, each the cells' values of 2 bytes
        v = struct.pack("<iII", 1, 2, 3) + bytes(b for _ in range(3) for c in ks for b in (c, c))
    else:
        v = struct.pack("<iQ", 1, 2) + bytes(b for c in ks for b in (c, c))
    return struct.pack("<I", cells) + meta + struct.pack("<II", int(v_trans), 2) + k + k + v + v


def test_a_state_keeps_only_the_cells_from_a_position_rows_and_all() -> None:
    for v_trans in (False, True):
        state = HEADER + part(2, 1, positioned(10, 6, v_trans))
        assert keep_from(state, 13) == HEADER + part(2, 1, positioned(13, 3, v_trans)), v_trans
        assert keep_from(state, 0) == state
        assert keep_from(state, 16) == HEADER + struct.pack("<III", 2, 0, 0), "none left: an empty stream"
    assert keep_from(HEADER + part(1, 0, positioned(0, 4))[:-1], 2) is None, "truncated"
