"""The host-memory cache tier: its bookkeeping alone, the prefix cache's spills into it, and the engine
restoring from it (a stand-in model whose "state" is the list of tokens its KV holds)."""

from __future__ import annotations

import psutil
import pytest

from llmhost.engine import EngineConfig, GenerationEvent, GenerationRequest, SamplingParams
from llmhost.engine.kv.host_cache import HostCache, StateKey, auto_budget_mb, host_cache
from llmhost.engine.kv.prefix_cache import KvKeep, KvSave, KvTrim, PrefixCache
from llmhost.engine.kv.swa_checkpoints import Checkpoint
from tests.unit.engine_fakes import FakeModel, config, engine_factory, expected

KEY = StateKey("model-a", kv="f16")


def toks(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def state(n_bytes: int) -> bytes:
    return bytes(n_bytes)


def test_a_stored_state_serves_a_prompt_that_extends_it() -> None:
    cache = HostCache(1000, min_tokens=4)
    saved = toks(0, 20)
    assert cache.can_store(KEY, saved, 80)
    cache.store(KEY, saved, state(80))
    match = cache.lookup(KEY, [*saved, 7, 7, 7])
    assert match is not None and match.n_tokens == 20 and match.n_state_tokens == 20
    assert (cache.hits, cache.restored_tokens) == (0, 0), "lookup is a check: nothing counted"
    assert cache.restore(match, 20) == state(80)
    assert (cache.hits, cache.restored_tokens, cache.stores, cache.bytes) == (1, 20, 1, 80)
    assert len(cache) == 1, "a restored state stays for other prompts sharing it"


def test_a_partial_prefix_is_served_and_too_short_a_one_is_not() -> None:
    cache = HostCache(1000, min_tokens=8)
    cache.store(KEY, toks(0, 30), state(120))
    match = cache.lookup(KEY, [*toks(0, 12), 99, 98])
    assert match is not None and match.n_tokens == 12 and match.n_state_tokens == 30
    assert cache.lookup(KEY, [*toks(0, 7), 99]) is None, "7 shared tokens < min_tokens"
    assert cache.lookup(KEY, toks(0, 10)) is not None, "a prompt shorter than the state"
    with pytest.raises(ValueError):
        cache.restore(match, 13)  # more than the prompt shares


def test_the_longest_shared_prefix_wins() -> None:
    cache = HostCache(1000, min_tokens=4)
    cache.store(KEY, [*toks(0, 10), 50, 51, 52, 53], state(56))
    cache.store(KEY, [*toks(0, 10), 60, 61, 62, 63, 64], state(60))
    match = cache.lookup(KEY, [*toks(0, 10), 60, 61, 62, 70])
    assert match is not None and match.n_tokens == 13 and match.n_state_tokens == 15


def test_least_recently_used_states_are_evicted_first() -> None:
    cache = HostCache(300, min_tokens=4)
    a, b, c = toks(0, 10), toks(100, 10), toks(200, 10)
    cache.store(KEY, a, state(100))
    cache.store(KEY, b, state(100))
    cache.store(KEY, c, state(100))
    hit = cache.lookup(KEY, a)
    assert hit is not None
    cache.restore(hit, 10)  # a becomes the most recently used: b is now the oldest
    cache.store(KEY, toks(300, 10), state(100))
    assert cache.lookup(KEY, b) is None
    assert cache.lookup(KEY, a) is not None and cache.lookup(KEY, c) is not None
    assert (cache.evictions, cache.bytes, len(cache)) == (1, 300, 3)


def test_the_budget_bounds_the_bytes_held() -> None:
    cache = HostCache(250, min_tokens=4)
    assert not cache.can_store(KEY, toks(0, 10), 251), "a state larger than the whole budget"
    cache.store(KEY, toks(0, 10), state(200))
    cache.store(KEY, toks(100, 10), state(200))  # the first goes to make room
    assert cache.bytes == 200 and cache.evictions == 1 and len(cache) == 1
    assert not cache.can_store(KEY, toks(0, 3), 12), "shorter than min_tokens"
    with pytest.raises(ValueError):
        cache.store(KEY, toks(0, 10), state(251))
    off = HostCache(0)
    assert not off.can_store(KEY, toks(0, 100), 1)


def test_a_state_is_never_served_under_another_model_adapter_or_kv_setting() -> None:
    cache = HostCache(1000, min_tokens=4)
    cache.store(KEY, toks(0, 20), state(80))
    prompt = toks(0, 25)
    assert cache.lookup(StateKey("model-b", kv="f16"), prompt) is None
    assert cache.lookup(StateKey("model-a", adapters="lora.gguf:1.0", kv="f16"), prompt) is None
    assert cache.lookup(StateKey("model-a", kv="q8_0"), prompt) is None
    assert cache.lookup(KEY, prompt) is not None
    # the same tokens under another key are a separate state
    assert cache.can_store(StateKey("model-b"), toks(0, 20), 80)


def test_a_longer_state_replaces_the_ones_it_extends_and_a_covered_one_is_not_kept() -> None:
    cache = HostCache(1000, min_tokens=4)
    cache.store(KEY, toks(0, 10), state(40))
    cache.store(KEY, toks(0, 20), state(80))
    assert len(cache) == 1 and cache.bytes == 80
    assert not cache.can_store(KEY, toks(0, 15), 60), "the stored 20-token state already serves it"
    assert cache.can_store(KEY, [*toks(0, 15), 99], 64)


def test_a_state_serves_only_prefixes_from_its_floor_on() -> None:
    """A state saved from a sequence that had lost its first sliding-window cells restores only
    prefixes whose next token's window it holds: a shorter shared start is not served by it."""
    cache = HostCache(1000, min_tokens=4)
    cache.store(KEY, toks(0, 30), state(120), floor=20)
    assert cache.lookup(KEY, [*toks(0, 10), 99]) is None
    match = cache.lookup(KEY, [*toks(0, 25), 99])
    assert match is not None and match.n_tokens == 25
    assert cache.lookup(KEY, toks(0, 20)) is None, "its last token is decoded: 19 positions kept, under 20"
    assert not cache.can_store(KEY, toks(0, 15), 60, floor=16), "no prefix of it could be restored"


def test_a_state_with_a_higher_floor_does_not_replace_one_serving_shorter_prefixes() -> None:
    cache = HostCache(1000, min_tokens=4)
    cache.store(KEY, toks(0, 10), state(40))  # a system prompt, whole
    cache.store(KEY, toks(0, 30), state(120), floor=20)  # a conversation on it, its start gone
    assert len(cache) == 2
    match = cache.lookup(KEY, [*toks(0, 10), 99])
    assert match is not None and match.n_state_tokens == 10
    assert cache.can_store(KEY, toks(0, 20), 80), "the stored 30-token state does not serve 10-19"
    cache.store(KEY, toks(0, 40), state(160))  # whole: serves all the others did
    assert len(cache) == 1 and cache.bytes == 160


def test_the_default_budget_is_a_capped_share_of_available_memory() -> None:
    assert auto_budget_mb(4 * 2**30) == 1024
    assert auto_budget_mb(256 * 2**30) == 8192
    assert auto_budget_mb(0) == 0


def test_the_default_budget_fits_in_the_memory_the_process_is_given() -> None:
    """An endpoint copy's memory_mb bounds it: its weights and what the process holds come first."""
    weights = 300 * 2**20
    rss_mb = psutil.Process().memory_info().rss // 2**20
    roomy = host_cache(EngineConfig(memory_mb=rss_mb + 300 + 100), weights)
    assert roomy is not None and 90 * 2**20 <= roomy.budget_bytes <= 100 * 2**20  # the RSS may grow a little
    assert host_cache(EngineConfig(memory_mb=rss_mb + 200), weights) is None  # no room left: off
    unbounded = host_cache(EngineConfig(memory_mb=0), weights)
    assert unbounded is not None and unbounded.budget_bytes > 100 * 2**20
    assert host_cache(EngineConfig(memory_mb=1, prompt_cache_mb=64), weights) is not None  # set: kept
    with pytest.raises(ValueError, match="memory_mb"):
        EngineConfig(memory_mb=-1)


# -- the prefix cache spills what it drops ------------------------------------------------------------
def test_the_prefix_cache_saves_evicted_kv_before_dropping_it() -> None:
    cache = PrefixCache(n_running=1, spill_min_tokens=4)
    a = cache.acquire(toks(0, 30), [])
    assert cache.release(a.kv_seq, toks(0, 30), reusable=True) == [], "kept in its slot"
    # a failed sequence's KV may be half-written: dropped, never saved
    b = cache.acquire([*toks(0, 20), 99, 98], [])
    assert b.ops == (KvSave(0, tuple(toks(0, 30))), KvKeep(0, 20)), "what it drops of the slot is saved"
    assert cache.release(b.kv_seq, toks(0, 22), reusable=False) == [KvTrim(b.kv_seq, 0)]
    c = cache.acquire(toks(500, 3), [])
    assert c.ops == () and cache.release(c.kv_seq, toks(500, 3), reusable=True) == []
    d = cache.acquire(toks(600, 5), [])  # another conversation takes the slot: 3 tokens, not saved
    assert d.ops == (KvTrim(0, 0),)
    cache.release(d.kv_seq, toks(600, 5), reusable=True)
    e = cache.acquire(toks(700, 5), [])
    assert e.ops == (KvSave(0, tuple(toks(600, 5))), KvTrim(0, 0))


def test_without_a_host_tier_nothing_is_saved() -> None:
    cache = PrefixCache(n_running=1)
    a = cache.acquire(toks(0, 30), [])
    cache.release(a.kv_seq, toks(0, 30), reusable=True)
    b = cache.acquire(toks(300, 5), [])
    assert b.ops == (KvTrim(0, 0),)


# -- the engine restores from it ---------------------------------------------------------------------
def run(engine, rid: str, prompt: list[int], n: int) -> list[GenerationEvent]:  # type: ignore[no-untyped-def]
    events: list[GenerationEvent] = []
    engine.add(GenerationRequest(rid, prompt, SamplingParams(max_tokens=n, temperature=0.0)))
    while engine.has_work:
        events += engine.step()
    return events


def tokens_of(events: list[GenerationEvent]) -> list[int]:
    return [t for ev in events for t in ev.token_ids]


def host_engine(model: FakeModel, slots: int = 1):  # type: ignore[no-untyped-def]
    # `slots` KV streams in the context; 1 MiB of host memory behind them
    cfg = config(max_concurrent=slots, prompt_cache_mb=1)
    return engine_factory(model, cfg)


def test_an_evicted_conversation_is_restored_and_only_its_new_turn_prefilled() -> None:
    model = FakeModel()
    engine = host_engine(model)
    turn1 = [1, *toks(2, 24)]
    out1 = tokens_of(run(engine, "a1", turn1, 6))
    assert out1 == expected(turn1, 6)
    run(engine, "b1", toks(30, 20), 4)  # another conversation evicts the first from the context
    stats = engine.stats()
    assert stats.prompt_cache_stores == 1 and stats.prompt_cache_entries == 1
    turn2 = [*turn1, *out1, 40, 41, 42, 43]
    events = run(engine, "a2", turn2, 5)
    assert tokens_of(events) == expected(turn2, 5)
    timings = events[-1].timings
    assert timings is not None
    # the saved state held turn 1 and all but its last answer token (never decoded)
    restored = len(turn1) + len(out1) - 1
    assert (timings.cache_n, timings.prompt_n) == (restored, len(turn2) - restored)
    stats = engine.stats()
    assert (stats.prompt_cache_hits, stats.prompt_cache_restored_tokens) == (1, restored)
    # turn 1's state, and b1's (20 + 3 tokens), saved when turn 2 took the context's one slot
    assert stats.prompt_cache_bytes == 4 * (restored + 23) and stats.prompt_cache_capacity_bytes == 2**20
    assert any(kv[: len(turn2)] == turn2 for kv in model.kv.values()), "KV is the conversation, in order"


def test_a_restore_llama_cpp_refuses_falls_back_to_a_full_prefill() -> None:
    model = FakeModel()
    engine = host_engine(model)
    turn1 = toks(2, 24)
    out1 = tokens_of(run(engine, "a1", turn1, 6))
    run(engine, "b1", toks(30, 20), 4)
    model.refuse_restore = True
    turn2 = [*turn1, *out1, 40, 41]
    events = run(engine, "a2", turn2, 5)
    assert tokens_of(events) == expected(turn2, 5)
    timings = events[-1].timings
    assert timings is not None and (timings.cache_n, timings.prompt_n) == (0, len(turn2))
    stats = engine.stats()
    assert (stats.prompt_cache_hits, stats.prompt_cache_restore_failures) == (0, 1)
    assert (stats.prompt_cache_restored_tokens, stats.prompt_tokens_prefilled) == (0, 24 + 20 + len(turn2))


def test_no_restore_where_the_context_still_holds_as_much() -> None:
    model = FakeModel()
    engine = host_engine(model)
    turn1 = toks(2, 24)
    out1 = tokens_of(run(engine, "a1", turn1, 6))
    events = run(engine, "a2", [*turn1, *out1, 40, 41], 3)  # still idle in the context: shared there
    timings = events[-1].timings
    assert timings is not None and timings.cache_n == len(turn1) + len(out1) - 1
    assert engine.stats().prompt_cache_hits == 0


def test_a_prefix_copied_from_a_refused_restore_is_prefilled_again_not_taken_as_held() -> None:
    """Two turns extending one saved conversation arrive together: the first is planned a restore, the
    second a copy of the first's restored prefix. When llama.cpp refuses the restore, the copy has
    nothing to copy: both sequences prefill their whole prompts (llama.cpp does not refuse a decode
    into an empty sequence at a later position: it would compute without the prefix)."""
    model = FakeModel()
    engine = host_engine(model, slots=2)
    turn1 = toks(2, 24)
    out1 = tokens_of(run(engine, "a1", turn1, 6))
    run(engine, "b1", toks(30, 20), 4)  # the other slot
    run(engine, "c1", [60, *toks(5, 19)], 4)  # evicts the conversation, least recently used, to host memory
    model.refuse_restore = True
    first, second = [*turn1, *out1, 40, 41], [*turn1, *out1, 44, 45, 46]
    events: dict[str, list[GenerationEvent]] = {"first": [], "second": []}
    for rid, prompt in (("first", first), ("second", second)):
        request = GenerationRequest(rid, prompt, SamplingParams(max_tokens=3, temperature=0.0))
        engine.add(request)
    for event in engine.step():  # both admitted in one step
        events[event.request_id].append(event)
    assert engine.stats().prompt_cache_restore_failures == 1
    for i, rid in enumerate(("first", "second")):
        seq = engine.scheduler.running[i]
        assert seq.request_id == rid and model.kv.get(seq.kv_seq, []) == seq.computed_tokens, rid
    while engine.has_work:
        for event in engine.step():
            events[event.request_id].append(event)
    for rid, prompt in (("first", first), ("second", second)):
        timings = events[rid][-1].timings
        assert timings is not None and (timings.cache_n, timings.prompt_n) == (0, len(prompt)), rid


def test_a_sequence_whose_kv_is_not_what_it_holds_is_never_decoded() -> None:
    """Belt and braces for any such bookkeeping slip: a prompt whose KV lacks the prefix it was given is
    prefilled from its start, since llama.cpp would decode it without that prefix and say nothing."""
    model = FakeModel()
    engine = host_engine(model)
    turn1 = toks(2, 24)
    out1 = tokens_of(run(engine, "a1", turn1, 6))
    idle = next(s for s, kv in model.kv.items() if kv)
    model.kv[idle] = []  # the cached conversation's KV is lost behind the engine's back
    turn2 = [*turn1, *out1, 40, 41]
    events = run(engine, "a2", turn2, 3)
    assert tokens_of(events) == expected(turn2, 3)
    timings = events[-1].timings
    assert timings is not None and (timings.cache_n, timings.prompt_n) == (0, len(turn2))
    assert any(kv[: len(turn2)] == turn2 for kv in model.kv.values())
    stats = engine.stats()
    assert (stats.prefix_cache_hits, stats.prefix_cache_reused_tokens) == (0, 0), "the lost prefix uncounted"


def test_a_cached_sequence_lacking_its_first_window_is_not_taken_over_for_its_start() -> None:
    """llama.cpp gave the first cells of an idle conversation to other sequences (its sliding-window
    layers no longer needed them): a prompt sharing only its start gets nothing from it and leaves it
    whole, so the conversation's own next turn still finds all of it."""
    model = FakeModel()
    engine = engine_factory(model, config(prefix_cache_seqs=2))
    turn1 = toks(2, 24)
    out1 = tokens_of(run(engine, "a1", turn1, 6))
    idle = next(s for s, kv in model.kv.items() if kv)
    model.floors[idle] = 20
    other = [*toks(2, 16), 45, 46]  # shares 16 tokens with it: below its floor
    events = run(engine, "b1", other, 3)
    assert tokens_of(events) == expected(other, 3)
    timings = events[-1].timings
    assert timings is not None and timings.cache_n == 0
    assert not any(isinstance(op, KvTrim) and op.seq == idle for op in model.applied), "left whole"
    turn2 = [*turn1, *out1, 40, 41]
    events = run(engine, "a2", turn2, 3)
    timings = events[-1].timings
    assert timings is not None and timings.cache_n == len(turn1) + len(out1) - 1


def cp(n_tokens: int, n_bytes: int = 8) -> Checkpoint:
    return Checkpoint(n_tokens, bytes(n_bytes))


def test_a_windowed_state_serves_a_shorter_prefix_from_a_checkpoint_saved_with_it() -> None:
    cache = HostCache(1000, min_tokens=4)
    saved = toks(0, 40)
    # its sliding-window cells hold positions from 30 on: a prompt must share at least 30 of it, or
    # reach one of its checkpoints (those at or past the floor add nothing and are not kept)
    cache.store(KEY, saved, state(160), floor=30, checkpoints=(cp(8), cp(16), cp(32)))
    assert cache.bytes == 160 + 2 * 8
    whole = cache.lookup(KEY, [*saved, 1])
    assert whole is not None and (whole.n_tokens, whole.checkpoint) == (40, None)
    short = cache.lookup(KEY, [*toks(0, 20), 99])
    assert short is not None and short.n_tokens == 16 and short.checkpoint == cp(16)
    assert short.n_state_tokens == 40
    # 17 shared tokens and the prompt's own last one: 16 taken, the checkpoint at 16 exactly
    edge = cache.lookup(KEY, toks(0, 17))
    assert edge is not None and edge.n_tokens == 16 and edge.checkpoint == cp(16)
    early = cache.lookup(KEY, [*toks(0, 10), 99])
    assert early is not None and early.n_tokens == 8
    assert cache.lookup(KEY, [*toks(0, 6), 99]) is None, "no checkpoint within 6 tokens"


def test_without_checkpoints_a_prefix_under_the_floor_is_not_served() -> None:
    cache = HostCache(1000, min_tokens=4)
    cache.store(KEY, toks(0, 40), state(160), floor=30)
    assert cache.lookup(KEY, [*toks(0, 20), 99]) is None


def test_a_state_covers_another_only_if_it_serves_each_prefix_the_other_does() -> None:
    cache = HostCache(1000, min_tokens=4)
    cache.store(KEY, toks(0, 30), state(120), floor=25, checkpoints=(cp(8),))
    # a longer state of the same conversation without the checkpoint at 8 does not replace it
    assert cache.can_store(KEY, toks(0, 50), 200, floor=25)
    cache.store(KEY, toks(0, 50), state(200), floor=25)
    assert len(cache) == 2
    # one with it does, and serves what both served
    cache.store(KEY, toks(0, 60), state(240), floor=25, checkpoints=(cp(8), cp(16)))
    assert len(cache) == 1 and cache.bytes == 240 + 16
    assert not cache.can_store(KEY, toks(0, 45), 180, floor=25, checkpoints=(cp(8),)), "held already"
    match = cache.lookup(KEY, [*toks(0, 12), 99])
    assert match is not None and match.n_tokens == 8
