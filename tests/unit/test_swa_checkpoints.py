"""SWA checkpoints as bookkeeping: which prompt positions get one, that a sequence keeps at most its
bound, that they follow the KV edits of their sequence (copied within a prefix, trimmed, moved, freed)
and that bytes shared by several sequences count once."""

from __future__ import annotations

import pytest

from llmhost.engine.kv.prefix_cache import KvCopy, KvMove, KvTrim
from llmhost.engine.kv.swa_checkpoints import CheckpointPolicy, SwaCheckpoints


def filled(per_seq: int = 3) -> SwaCheckpoints:
    """Sequence 0 prefilling a 1,000-token prompt in 64-token chunks, a checkpoint wherever wanted."""
    cps = SwaCheckpoints(CheckpointPolicy(per_seq, spacing=100, live=64))
    for n in range(0, 1000, 64):
        if cps.wants(0, n, 1000):
            cps.add(0, n, bytes(n))
    return cps


def test_checkpoints_are_spaced_bounded_and_kept_from_the_start() -> None:
    cps = filled()
    # none at 0 (nothing to save), 100 positions apart, the first three kept (what other prompts share)
    assert [cps.newest_at_or_before(0, n).n_tokens for n in (128, 255, 400, 999)] == [64, 192, 320, 320]
    assert cps.count(0) == 3 and cps.made == 3
    assert cps.newest_at_or_before(0, 63) is None


def test_no_checkpoint_where_the_window_still_holds_the_positions_at_the_prompts_end() -> None:
    cps = SwaCheckpoints(CheckpointPolicy(3, spacing=10, live=64))
    assert not cps.wants(0, 40, 100), "40 + 64 >= 100: its cells are still held when the prompt is done"
    assert cps.wants(0, 30, 100)
    assert not SwaCheckpoints(CheckpointPolicy(0, spacing=10, live=0)).wants(0, 30, 100), "0: none made"


def test_checkpoints_follow_copies_trims_and_moves() -> None:
    cps = filled()
    cps.follow(KvCopy(0, 5, 200))
    assert cps.count(5) == 2 and cps.at(5, 192) is not None and cps.at(5, 320) is None
    assert cps.nbytes == 64 + 192 + 320, "a copy shares its source's bytes"
    cps.follow(KvTrim(0, 100))
    assert cps.count(0) == 1
    cps.follow(KvMove(5, 1, 200))
    assert cps.count(5) == 0 and cps.count(1) == 2
    cps.follow(KvTrim(1, 0))
    cps.follow(KvTrim(0, 0))
    assert cps.nbytes == 0 and cps.count(0) == cps.count(1) == 0, "freed with their sequence"


def test_a_copy_replaces_what_its_target_held() -> None:
    cps = filled()
    cps.add(7, 50, b"x")
    cps.follow(KvCopy(0, 7, 1000))
    assert [cps.newest_at_or_before(7, n).n_tokens for n in (70, 1000)] == [64, 320]
    cps.forget(7)
    assert cps.count(7) == 0
    cps.forget()
    assert cps.count(0) == 0


def test_a_policy_out_of_bounds_is_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        CheckpointPolicy(-1, spacing=1, live=0)


def test_the_most_cells_a_sequences_checkpoints_hold() -> None:
    policy = CheckpointPolicy(3, spacing=512, live=512)
    # positions 1535, 1023 and 511 of a 2,048-token prompt: at most the 512-position window each
    assert policy.most_cells(2048, 512) == 512 + 512 + 511
    assert policy.most_cells(1024, 512) == 511, "only one fits before the last micro-batch"
    assert policy.most_cells(512, 512) == 0
    assert CheckpointPolicy(0, spacing=512, live=512).most_cells(4096, 512) == 0


def test_past_the_budget_the_checkpoints_made_first_go_from_every_sequence_sharing_them() -> None:
    cps = SwaCheckpoints(CheckpointPolicy(3, spacing=10, live=0, budget=100))
    assert cps.add(0, 10, bytes(40)) and cps.add(0, 20, bytes(40))
    cps.follow(KvCopy(0, 1, 20))  # sequence 1 shares both: counted once
    assert cps.nbytes == 80
    assert cps.add(2, 10, bytes(30)), "the first made (0 and 1's at 10) goes to make room"
    assert cps.nbytes == 70 and cps.dropped == 1
    assert cps.at(0, 10) is None and cps.at(1, 10) is None and cps.at(1, 20) is not None
    assert not cps.add(3, 10, bytes(101)), "larger than the whole budget: not kept, nothing dropped"
    assert cps.nbytes == 70 and cps.count(3) == 0
    with pytest.raises(ValueError, match="policy"):
        CheckpointPolicy(3, spacing=1, live=0, budget=-1)
