from llmhost.engine.kv.prefix_cache import KvCopy, KvMove, KvSave, KvTrim, PrefixCache, common_prefix_len


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


def test_fresh_prompt_gets_the_lowest_free_slot_and_no_ops() -> None:
    cache = PrefixCache(n_slots=4, max_idle_seqs=2)
    match = cache.acquire([1, 2, 3], running=[])
    assert (match.kv_seq, match.n_reused, match.ops, cache.hits) == (0, 0, (), 0)
    assert cache.acquire([4], running=[]).kv_seq == 1


def test_running_sequences_keep_the_lowest_ids_so_a_batch_runs_consecutively() -> None:
    cache = PrefixCache(n_slots=3, max_idle_seqs=2)
    a, b, _ = (cache.acquire([k], running=[]) for k in (1, 2, 3))
    cache.release(a.kv_seq, [1], reusable=True)
    cache.release(b.kv_seq, [2], reusable=True)
    assert [cache.acquire([k], running=[]).kv_seq for k in (7, 8)] == [0, 1]
    assert not cache.can_acquire(), "idle ids (3, 4) are never given to running sequences"


def test_shared_prefix_with_running_sequence_is_copied() -> None:
    cache = PrefixCache(4, 2)
    first = cache.acquire([1, 2, 3, 4, 5], running=[])
    second = cache.acquire([1, 2, 3, 9], running=[(first.kv_seq, [1, 2, 3, 4, 5])])
    assert second.kv_seq != first.kv_seq
    assert second.n_reused == 3
    assert second.ops == (KvCopy(first.kv_seq, second.kv_seq, 3),)


def test_identical_prompt_still_decodes_its_last_token() -> None:
    cache = PrefixCache(4, 2)
    first = cache.acquire([1, 2, 3], running=[])
    again = cache.acquire([1, 2, 3], running=[(first.kv_seq, [1, 2, 3])])
    assert again.n_reused == 2


def test_a_finished_sequence_is_copied_to_an_idle_id_and_its_next_turn_copied_back() -> None:
    cache = PrefixCache(2, 2)
    m = cache.acquire([1, 2, 3], running=[])
    ops = cache.release(m.kv_seq, [1, 2, 3, 7, 8], reusable=True)
    assert ops == [KvCopy(0, 2, 5), KvTrim(0, 0)] and cache.idle_seqs == 1 and cache.idle_tokens == 5
    turn2 = cache.acquire([1, 2, 3, 7, 8, 9, 4], running=[])
    assert (turn2.kv_seq, turn2.n_reused, turn2.ops) == (0, 5, (KvCopy(2, 0, 5),))
    assert cache.idle_seqs == 1, "the idle copy stays until the turn finishes"
    ops = cache.release(turn2.kv_seq, [1, 2, 3, 7, 8, 9, 4, 5], reusable=True)
    assert ops == [KvCopy(0, 2, 8), KvTrim(0, 0)] and cache.idle_seqs == 1, "the turn replaces it"


def test_a_sequence_an_idle_one_already_holds_is_not_copied_again() -> None:
    cache = PrefixCache(2, 2)
    m = cache.acquire([1, 2, 3], running=[])
    cache.release(m.kv_seq, [1, 2, 3, 4], reusable=True)
    again = cache.acquire([1, 2, 3], running=[])
    assert cache.release(again.kv_seq, [1, 2, 3], reusable=True) == [KvTrim(again.kv_seq, 0)]
    assert cache.idle_seqs == 1


def test_beyond_the_idle_ids_the_least_recently_used_leaves() -> None:
    cache = PrefixCache(1, max_idle_seqs=2)
    for k in (1, 2):
        cache.release(cache.acquire([k], running=[]).kv_seq, [k, k], reusable=True)
    cache.acquire([1, 1, 5], running=[])  # uses the first one: the second is now least recent
    ops = cache.release(0, [3, 3], reusable=True)
    assert ops == [KvTrim(2, 0), KvCopy(0, 2, 2), KvTrim(0, 0)] and cache.idle_seqs == 2


def test_an_evicted_sequence_long_enough_is_saved_to_host_memory_first() -> None:
    cache = PrefixCache(1, max_idle_seqs=1, spill_min_tokens=3)
    cache.release(cache.acquire([1], running=[]).kv_seq, [1, 1, 1], reusable=True)
    ops = cache.release(cache.acquire([2], running=[]).kv_seq, [2, 2], reusable=True)
    assert ops == [KvSave(1, (1, 1, 1)), KvTrim(1, 0), KvCopy(0, 1, 2), KvTrim(0, 0)]


def test_without_idle_ids_a_finished_sequence_only_goes_to_host_memory() -> None:
    cache = PrefixCache(1, max_idle_seqs=0, spill_min_tokens=2)
    assert cache.release(cache.acquire([1], running=[]).kv_seq, [1, 2], reusable=True) == [
        KvSave(0, (1, 2)),
        KvTrim(0, 0),
    ]
    assert cache.release(cache.acquire([1], running=[]).kv_seq, [1], reusable=True) == [KvTrim(0, 0)]


def test_unreusable_release_frees_the_id() -> None:
    cache = PrefixCache(1, 1)
    a = cache.acquire([1, 2], running=[])
    assert not cache.can_acquire()
    assert cache.release(a.kv_seq, [1, 2], reusable=False) == [KvTrim(a.kv_seq, 0)]
    assert cache.can_acquire() and cache.idle_seqs == 0


def test_adopted_prefix_is_reused_by_the_first_matching_prompt() -> None:
    cache = PrefixCache(4, 2)
    kv = cache.adopt([1, 2, 3, 4])
    assert kv is not None and kv >= 4 and cache.idle_seqs == 1 and cache.idle_tokens == 4
    match = cache.acquire([1, 2, 3, 4, 9, 9], running=[])
    assert (match.kv_seq, match.n_reused, match.ops) == (0, 4, (KvCopy(kv, 0, 4),))


def test_adopt_refuses_what_the_cache_cannot_hold() -> None:
    assert PrefixCache(4, 0).adopt([1, 2]) is None  # caching off
    assert PrefixCache(4, 2).adopt([]) is None
    full = PrefixCache(1, 1)
    assert full.adopt([1]) == 1
    assert full.adopt([2]) is None  # no idle id left


def test_drop_frees_an_adopted_sequence() -> None:
    cache = PrefixCache(2, 2)
    kv = cache.adopt([5, 6])
    assert kv is not None
    assert cache.drop(kv) == [KvTrim(kv, 0)]
    assert cache.idle_seqs == 0
    assert cache.drop(kv) == []
    assert cache.acquire([5, 6, 7], running=[]).n_reused == 0
    assert cache.adopt([8]) is not None, "its id is free again"


def test_an_idle_sequence_sharing_only_its_start_is_copied_from_and_stays() -> None:
    cache = PrefixCache(4, 4)
    conv = list(range(1, 11))
    m = cache.acquire(conv, running=[])
    cache.release(m.kv_seq, conv, reusable=True)
    other = cache.acquire([1, 2, 3, 50, 51], running=[])  # another user, the same system prompt
    assert other.ops == (KvCopy(4, other.kv_seq, 3),)
    cache.release(other.kv_seq, [1, 2, 3, 50, 51], reusable=True)
    assert cache.idle_seqs == 2, "the conversation stays for its next turn"
    turn2 = cache.acquire([*conv, 60, 61], running=[])
    assert turn2.n_reused == 10 and turn2.ops == (KvCopy(4, turn2.kv_seq, 10),)


def test_a_sequence_serves_only_prefixes_from_its_kv_floor_on() -> None:
    """A long sequence lost its first sliding-window cells: a prompt sharing only its start is not
    given it, its own next turn still is."""
    floors = dict.fromkeys(range(6), 0)
    cache = PrefixCache(4, 2, reach=lambda seq, n: n if n >= floors[seq] else 0)
    conversation = list(range(1, 31))
    first = cache.acquire(conversation, running=[])
    cache.release(first.kv_seq, conversation, reusable=True)
    floors[4] = 20
    other = cache.acquire([*conversation[:10], 99], running=[])
    assert other.n_reused == 0 and other.ops == () and cache.hits == 0
    running = [(other.kv_seq, [*conversation[:10], 99])]
    next_turn = cache.acquire([*conversation, 40, 41], running=running)
    assert next_turn.n_reused == 30 and next_turn.ops == (KvCopy(4, next_turn.kv_seq, 30),)


def test_a_lost_prefix_is_no_longer_counted_as_reused() -> None:
    cache = PrefixCache(4, 2)
    first = cache.acquire([1, 2, 3, 4, 5], running=[])
    cache.acquire([1, 2, 3, 9], running=[(first.kv_seq, [1, 2, 3, 4, 5])])
    assert (cache.hits, cache.reused_tokens) == (1, 3)
    cache.reuse_lost(3)
    assert (cache.hits, cache.reused_tokens) == (0, 0)


def test_a_free_id_below_a_running_one_is_filled_by_moving_the_highest() -> None:
    cache = PrefixCache(n_slots=4, max_idle_seqs=2)
    ids = [cache.acquire([k], running=[]).kv_seq for k in (1, 2, 3)]
    assert cache.relocation(ids) is None, "0, 1, 2 run consecutively"
    cache.release(0, [1], reusable=False)
    assert cache.relocation([1, 2]) == (2, 0)
    assert cache.relocate(2, 0, 5) == KvMove(2, 0, 5)
    assert cache.relocation([0, 1]) is None
    assert cache.acquire([4], running=[]).kv_seq == 2, "the id it left is free again"
