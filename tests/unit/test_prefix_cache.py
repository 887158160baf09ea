from llmhost.engine.kv.prefix_cache import (
    KvCopy,
    KvKeep,
    KvMove,
    KvSave,
    KvTrim,
    PrefixCache,
    common_prefix_len,
)


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


def test_fresh_prompt_gets_the_lowest_empty_slot_and_no_ops() -> None:
    cache = PrefixCache(n_running=4)
    match = cache.acquire([1, 2, 3], running=[])
    assert (match.kv_seq, match.n_reused, match.ops, cache.hits) == (0, 0, (), 0)
    assert cache.acquire([4], running=[]).kv_seq == 1


def test_no_more_than_n_running_slots_run_even_with_extra_streams() -> None:
    cache = PrefixCache(n_running=2, n_extra=2)
    cache.acquire([1], running=[])
    cache.acquire([2], running=[])
    assert not cache.can_acquire(), "the extra streams (2, 3) only ever hold finished requests' KV"


def test_shared_prefix_with_running_sequence_is_copied() -> None:
    cache = PrefixCache(4)
    first = cache.acquire([1, 2, 3, 4, 5], running=[])
    second = cache.acquire([1, 2, 3, 9], running=[(first.kv_seq, [1, 2, 3, 4, 5])])
    assert second.kv_seq != first.kv_seq
    assert second.n_reused == 3
    assert second.ops == (KvCopy(first.kv_seq, second.kv_seq, 3),)


def test_identical_prompt_still_decodes_its_last_token() -> None:
    cache = PrefixCache(4)
    first = cache.acquire([1, 2, 3], running=[])
    again = cache.acquire([1, 2, 3], running=[(first.kv_seq, [1, 2, 3])])
    assert again.n_reused == 2


def test_a_finished_sequence_keeps_its_kv_in_its_slot_and_its_next_turn_takes_it_in_place() -> None:
    cache = PrefixCache(2)
    m = cache.acquire([1, 2, 3], running=[])
    assert cache.release(m.kv_seq, [1, 2, 3, 7, 8], reusable=True) == [], "no copy: the KV stays"
    assert (cache.held_seqs, cache.held_tokens) == (1, 5)
    cache.acquire([40], running=[])  # another request takes the empty slot, not the held one
    turn2 = cache.acquire([1, 2, 3, 7, 8, 9, 4], running=[])
    assert (turn2.kv_seq, turn2.n_reused, turn2.ops) == (0, 5, (KvKeep(0, 5),))
    assert cache.held_seqs == 0 and (cache.hits, cache.reused_tokens) == (1, 5)


def test_a_prompt_sharing_only_the_start_of_a_held_slot_copies_it_into_an_empty_slot() -> None:
    cache = PrefixCache(4)
    conv = list(range(1, 50))
    cache.release(cache.acquire(conv, running=[]).kv_seq, conv, reusable=True)
    other = cache.acquire([1, 2, 3, 99, 98], running=[])  # another user, the same system prompt
    assert (other.kv_seq, other.ops) == (1, (KvCopy(0, 1, 3),))
    assert cache.held_seqs == 1, "the conversation stays for its next turn"
    turn2 = cache.acquire([*conv, 60, 61], running=[(1, [1, 2, 3, 99])])
    assert (turn2.kv_seq, turn2.n_reused, turn2.ops) == (0, 49, (KvKeep(0, 49),))


def test_a_copy_from_a_held_slot_never_goes_into_that_slot() -> None:
    # the held slot 2 is where a new request would leave no gap among the running 0 and 1, but it is
    # also what the request copies its prefix from: the copy goes into the empty slot 3 instead (taking
    # 2 would empty the source before the copy, and the prompt would prefill all of it)
    cache = PrefixCache(4, spill_min_tokens=8)
    a, b = cache.acquire([100], running=[]), cache.acquire([200], running=[])
    conv = list(range(1, 50))
    cache.release(cache.acquire(conv, running=[]).kv_seq, conv, reusable=True)
    other = cache.acquire([1, 2, 3, 99, 98], running=[(a.kv_seq, [100]), (b.kv_seq, [200])])
    assert (other.kv_seq, other.n_reused, other.ops) == (3, 3, (KvCopy(2, 3, 3),))
    assert cache.held_seqs == 1, "the conversation stays in slot 2 for its next turn"


def test_without_an_empty_slot_a_partial_match_takes_the_slot_saving_what_it_drops() -> None:
    cache = PrefixCache(1, spill_min_tokens=8)
    conv = list(range(1, 50))
    cache.release(cache.acquire(conv, running=[]).kv_seq, conv, reusable=True)
    other = cache.acquire([1, 2, 3, 99, 98], running=[])
    assert other.ops == (KvSave(0, tuple(conv)), KvKeep(0, 3)) and other.n_reused == 3


def test_without_an_empty_slot_the_least_recently_used_is_evicted() -> None:
    cache = PrefixCache(2, spill_min_tokens=3)
    a, b = cache.acquire([1], running=[]), cache.acquire([2], running=[])
    cache.release(a.kv_seq, [1, 1, 1], reusable=True)
    cache.release(b.kv_seq, [2, 2], reusable=True)
    fresh = cache.acquire([5, 5], running=[])
    assert (fresh.kv_seq, fresh.ops) == (0, (KvSave(0, (1, 1, 1)), KvTrim(0, 0)))
    assert cache.acquire([6], running=[]).ops == (KvTrim(1, 0),), "too short to be worth saving"


def test_a_turn_supersedes_the_slot_holding_its_previous_turn() -> None:
    cache = PrefixCache(2)
    first = cache.acquire([1, 2], running=[])
    cache.release(first.kv_seq, [1, 2, 3], reusable=True)
    # the same conversation served beside it by another slot (its own slot was busy)
    blocker = cache.acquire([1, 2, 3, 4], running=[])
    assert blocker.kv_seq == 0
    turn = cache.acquire([1, 2, 3, 4, 5], running=[(0, [1, 2, 3, 4])])
    assert turn.kv_seq == 1
    cache.release(0, [9], reusable=False)
    assert cache.release(1, [1, 2, 3, 4, 5, 6], reusable=True) == []
    assert cache.held_seqs == 1


def test_a_sequence_a_free_slot_already_holds_is_not_kept_twice() -> None:
    cache = PrefixCache(2)
    cache.release(cache.acquire([1, 2, 3], running=[]).kv_seq, [1, 2, 3, 4], reusable=True)
    again = cache.acquire([7, 1, 2, 3], running=[])
    assert cache.release(again.kv_seq, [1, 2, 3], reusable=True) == [KvTrim(again.kv_seq, 0)]
    assert cache.held_seqs == 1


def test_unreusable_release_empties_the_slot() -> None:
    cache = PrefixCache(1)
    a = cache.acquire([1, 2], running=[])
    assert not cache.can_acquire()
    assert cache.release(a.kv_seq, [1, 2], reusable=False) == [KvTrim(a.kv_seq, 0)]
    assert cache.can_acquire() and cache.held_seqs == 0


def test_without_reuse_a_held_slot_is_evicted_not_reused() -> None:
    cache = PrefixCache(1)
    cache.release(cache.acquire([1, 2, 3], running=[]).kv_seq, [1, 2, 3], reusable=True)
    match = cache.acquire([1, 2, 3, 4], running=[], reuse=False)
    assert (match.n_reused, match.ops) == (0, (KvTrim(0, 0),))


def test_adopted_prefix_is_reused_by_the_first_matching_prompt() -> None:
    cache = PrefixCache(4)
    kv = cache.adopt([1, 2, 3, 4])
    assert kv == 0 and cache.held_seqs == 1 and cache.held_tokens == 4
    match = cache.acquire([1, 2, 3, 4, 9, 9], running=[])
    assert (match.kv_seq, match.n_reused, match.ops) == (0, 4, (KvKeep(0, 4),))


def test_adopt_refuses_what_the_cache_cannot_hold() -> None:
    assert PrefixCache(4).adopt([]) is None
    full = PrefixCache(1)
    assert full.adopt([1]) == 0
    assert full.adopt([2]) is None  # no empty slot left


def test_drop_frees_an_adopted_sequence() -> None:
    cache = PrefixCache(2)
    kv = cache.adopt([5, 6])
    assert kv is not None
    assert cache.drop(kv) == [KvTrim(kv, 0)]
    assert cache.held_seqs == 0
    assert cache.drop(kv) == []
    assert cache.acquire([5, 6, 7], running=[]).n_reused == 0


def test_a_sequence_serves_only_prefixes_from_its_kv_floor_on() -> None:
    """A long sequence lost its first sliding-window cells: a prompt sharing only its start is not
    given it, its own next turn still is."""
    floors = dict.fromkeys(range(4), 0)
    cache = PrefixCache(4, reach=lambda seq, n: n if n >= floors[seq] else 0)
    conversation = list(range(1, 40))
    first = cache.acquire(conversation, running=[])
    cache.release(first.kv_seq, conversation, reusable=True)
    floors[0] = 20
    other = cache.acquire([*conversation[:10], 99], running=[])
    assert other.n_reused == 0 and other.ops == () and cache.hits == 0
    running = [(other.kv_seq, [*conversation[:10], 99])]
    next_turn = cache.acquire([*conversation, 40, 41], running=running)
    assert next_turn.n_reused == 39 and next_turn.ops == (KvKeep(0, 39),)


def test_a_lost_prefix_is_no_longer_counted_as_reused() -> None:
    cache = PrefixCache(4)
    first = cache.acquire([1, 2, 3, 4, 5], running=[])
    cache.acquire([1, 2, 3, 9], running=[(first.kv_seq, [1, 2, 3, 4, 5])])
    assert (cache.hits, cache.reused_tokens) == (1, 3)
    cache.reuse_lost(3)
    assert (cache.hits, cache.reused_tokens) == (0, 0)


def test_running_ids_are_gathered_into_one_consecutive_run() -> None:
    cache = PrefixCache(n_running=4, spill_min_tokens=2)
    ids = [cache.acquire([k], running=[]).kv_seq for k in (1, 2, 3, 4)]
    assert cache.relocation(ids) is None, "0-3 run consecutively"
    cache.release(0, [1], reusable=False)
    assert cache.relocation([1, 2, 3]) is None, "1-3 do too: a run need not start at 0"
    cache.release(1, [2, 2, 2], reusable=True)
    assert cache.relocation([2]) is None and cache.relocation([2, 3]) is None
    cache.release(3, [4], reusable=False)
    cache.acquire([9, 9], running=[])  # takes 3 again: beside 2, where 0 would leave a gap
    cache.release(3, [9], reusable=False)
    assert cache.held_seqs == 1
    cache.release(2, [3], reusable=False)
    first, second = cache.acquire([5], running=[]), cache.acquire([6], running=[])
    assert (first.kv_seq, second.kv_seq) == (0, 1), "the second beside the first, slot 1's KV evicted"
    assert second.ops == (KvSave(1, (2, 2, 2)), KvTrim(1, 0))


def test_a_new_request_takes_the_free_slot_that_leaves_no_gap() -> None:
    cache = PrefixCache(n_running=4)
    for k in range(4):
        cache.acquire([k], running=[])
    for slot in (0, 1, 3):
        cache.release(slot, [slot, slot], reusable=True)
    # 2 runs; 0, 1 and 3 hold KV, 0 the least recently used: 1 or 3 keeps the run whole
    assert cache.acquire([7], running=[]).kv_seq == 1, "the least recently used of those beside 2"


def test_a_move_into_a_slot_holding_kv_saves_it_first() -> None:
    cache = PrefixCache(n_running=3, spill_min_tokens=2)
    for k in range(3):
        cache.acquire([k], running=[])
    cache.release(1, [5, 5, 5], reusable=True)
    assert cache.relocation([0, 2]) == (2, 1)
    assert cache.relocate(2, 1, 4) == [KvSave(1, (5, 5, 5)), KvTrim(1, 0), KvMove(2, 1, 4)]
    assert cache.relocation([0, 1]) is None and cache.held_seqs == 0
    assert cache.acquire([4], running=[]).kv_seq == 2, "the id it left is free again"


def test_the_run_chosen_holds_most_running_sequences_then_evicts_the_least() -> None:
    cache = PrefixCache(n_running=3, n_extra=3)
    for k in range(6):
        cache.release(cache.acquire([k], running=[]).kv_seq, [k, k], reusable=True)
    # every slot holds KV now; three requests land in 0, 4 and 5 (taken in place)
    running = [cache.acquire([k, k, 9], running=[]).kv_seq for k in (0, 4, 5)]
    assert running == [0, 4, 5]
    src, dst = cache.relocation(running) or (-1, -1)
    assert (src, dst) == (0, 3), "4 and 5 already form most of the run 3-5"
