from llmhost.engine.prefix_cache import KvCopy, KvTrim, PrefixCache, common_prefix_len


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


def test_fresh_prompt_gets_a_free_id_and_no_ops() -> None:
    cache = PrefixCache(n_seq_ids=4, max_idle_seqs=2, max_tokens=100)
    match = cache.acquire([1, 2, 3], running=[])
    assert match.n_reused == 0
    assert match.ops == ()
    assert cache.hits == 0


def test_shared_prefix_with_running_sequence_is_copied() -> None:
    cache = PrefixCache(4, 2, 100)
    first = cache.acquire([1, 2, 3, 4, 5], running=[])
    second = cache.acquire([1, 2, 3, 9], running=[(first.kv_seq, [1, 2, 3, 4, 5])])
    assert second.kv_seq != first.kv_seq
    assert second.n_reused == 3
    assert second.ops == (KvCopy(first.kv_seq, second.kv_seq, 3),)


def test_identical_prompt_still_decodes_its_last_token() -> None:
    cache = PrefixCache(4, 2, 100)
    first = cache.acquire([1, 2, 3], running=[])
    again = cache.acquire([1, 2, 3], running=[(first.kv_seq, [1, 2, 3])])
    assert again.n_reused == 2


def test_idle_sequence_is_claimed_and_trimmed() -> None:
    cache = PrefixCache(4, 2, 100)
    m = cache.acquire([1, 2, 3], running=[])
    assert cache.release(m.kv_seq, [1, 2, 3, 7, 8], reusable=True) == []
    reuse = cache.acquire([1, 2, 3, 4], running=[])
    assert reuse.kv_seq == m.kv_seq
    assert reuse.n_reused == 3
    assert reuse.ops == (KvTrim(m.kv_seq, 3),)
    assert cache.idle_seqs == 0


def test_release_evicts_least_recently_used_beyond_token_budget() -> None:
    cache = PrefixCache(4, max_idle_seqs=4, max_tokens=10)
    a = cache.acquire([1], running=[])
    b = cache.acquire([2], running=[])
    cache.release(a.kv_seq, [1] * 6, reusable=True)
    ops = cache.release(b.kv_seq, [2] * 6, reusable=True)
    assert ops == [KvTrim(a.kv_seq, 0)]
    assert cache.idle_tokens == 6


def test_unreusable_release_frees_the_id() -> None:
    cache = PrefixCache(1, 1, 10)
    a = cache.acquire([1, 2], running=[])
    assert not cache.can_acquire()
    assert cache.release(a.kv_seq, [1, 2], reusable=False) == [KvTrim(a.kv_seq, 0)]
    assert cache.can_acquire()


def test_ids_run_out_then_idle_sequences_are_evicted() -> None:
    cache = PrefixCache(2, 2, 100)
    a = cache.acquire([1, 2], running=[])
    b = cache.acquire([3, 4], running=[])
    cache.release(a.kv_seq, [1, 2], reusable=True)
    c = cache.acquire([5, 6], running=[(b.kv_seq, [3, 4])])
    assert c.kv_seq == a.kv_seq
    assert c.ops == (KvTrim(a.kv_seq, 0),)


def test_adopted_prefix_is_reused_by_the_first_matching_prompt() -> None:
    cache = PrefixCache(4, 2, 100)
    kv = cache.adopt([1, 2, 3, 4])
    assert kv is not None and cache.idle_seqs == 1 and cache.idle_tokens == 4
    match = cache.acquire([1, 2, 3, 4, 9, 9], running=[])
    assert match.kv_seq == kv
    assert match.n_reused == 4
    assert match.ops == (KvTrim(kv, 4),)


def test_adopt_refuses_what_the_cache_cannot_hold() -> None:
    assert PrefixCache(4, 0, 100).adopt([1, 2]) is None  # caching off
    assert PrefixCache(4, 2, 3).adopt([1, 2, 3, 4]) is None  # too many tokens
    assert PrefixCache(4, 2, 100).adopt([]) is None
    full = PrefixCache(1, 2, 100)
    assert full.adopt([1]) == 0
    assert full.adopt([2]) is None  # no free id left


def test_drop_frees_an_adopted_sequence() -> None:
    cache = PrefixCache(2, 2, 100)
    kv = cache.adopt([5, 6])
    assert kv is not None
    assert cache.drop(kv) == [KvTrim(kv, 0)]
    assert cache.idle_seqs == 0
    assert cache.drop(kv) == []
    assert cache.acquire([5, 6, 7], running=[]).n_reused == 0


def test_idle_prefixes_may_use_kv_no_running_sequence_can_need_and_leave_when_it_shrinks() -> None:
    cache = PrefixCache(n_seq_ids=8, max_idle_seqs=8, max_tokens=10)
    assert cache.set_room(30) == []
    for i in range(3):
        m = cache.acquire([100 * i + t for t in range(10)], [])
        assert cache.release(m.kv_seq, [100 * i + t for t in range(10)], reusable=True) == []
    assert cache.idle_tokens == 30, "beyond the 10 set aside, in KV nothing else can need"
    first = 0  # LRU
    assert cache.set_room(20) == [KvTrim(first, 0)]
    assert cache.set_room(0) == [KvTrim(1, 0)], "never less than what is set aside"
    assert cache.idle_tokens == 10


def test_without_kv_set_aside_no_prefix_is_kept_whatever_the_room() -> None:
    cache = PrefixCache(n_seq_ids=4, max_idle_seqs=4, max_tokens=0)
    assert cache.set_room(1000) == []
    m = cache.acquire([1, 2, 3], [])
    assert cache.release(m.kv_seq, [1, 2, 3], reusable=True) == [KvTrim(m.kv_seq, 0)]


def test_an_idle_sequence_sharing_only_its_start_is_copied_from_and_stays() -> None:
    cache = PrefixCache(4, 4, 100)
    conv = list(range(1, 11))
    m = cache.acquire(conv, running=[])
    cache.release(m.kv_seq, conv, reusable=True)
    other = cache.acquire([1, 2, 3, 50, 51], running=[])  # another user, the same system prompt
    assert other.kv_seq != m.kv_seq and other.ops == (KvCopy(m.kv_seq, other.kv_seq, 3),)
    assert cache.idle_seqs == 1, "the conversation stays for its next turn"
    turn2 = cache.acquire([*conv, 60, 61], running=[])
    assert turn2.kv_seq == m.kv_seq and turn2.n_reused == 10 and cache.idle_seqs == 0


def test_a_sequence_serves_only_prefixes_from_its_kv_floor_on() -> None:
    """llama.cpp gave the first sliding-window cells of a long idle sequence away: a prompt sharing only
    its start is not given it (nor does it take the sequence over), its own next turn still is."""
    floors = {0: 0, 1: 0, 2: 0, 3: 0}
    cache = PrefixCache(4, 2, 100, kv_floor=floors.__getitem__)
    conversation = list(range(1, 31))
    first = cache.acquire(conversation, running=[])
    cache.release(first.kv_seq, conversation, reusable=True)
    floors[first.kv_seq] = 20
    other = cache.acquire([*conversation[:10], 99], running=[])
    assert other.kv_seq != first.kv_seq and other.n_reused == 0 and other.ops == () and cache.hits == 0
    running = [(other.kv_seq, [*conversation[:10], 99])]
    next_turn = cache.acquire([*conversation, 40, 41], running=running)
    assert (next_turn.kv_seq, next_turn.n_reused) == (first.kv_seq, 30)
    assert next_turn.ops == (KvTrim(first.kv_seq, 30),), "nothing of it trimmed away"


def test_a_lost_prefix_is_no_longer_counted_as_reused() -> None:
    cache = PrefixCache(4, 2, 100)
    first = cache.acquire([1, 2, 3, 4, 5], running=[])
    cache.acquire([1, 2, 3, 9], running=[(first.kv_seq, [1, 2, 3, 4, 5])])
    assert (cache.hits, cache.reused_tokens) == (1, 3)
    cache.reuse_lost(3)
    assert (cache.hits, cache.reused_tokens) == (0, 0)
