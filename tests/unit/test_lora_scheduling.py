"""LoRA adapter sets in the scheduler and the caches: plain data, no model."""

import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.host_cache import HostCache, StateKey
from llmhost.engine.kv.prefix_cache import KvKeep, KvSave, PrefixCache
from llmhost.engine.lora import AdapterSpec, adapter_set, label, parse_lora
from llmhost.engine.sched.scheduler import Scheduler
from llmhost.engine.sched.sequence import Sequence

A = (("a", 1.0),)
B = (("b", 0.5),)


def seq(rid: str, prompt: list[int], adapters: tuple[tuple[str, float], ...] = (), n: int = 8) -> Sequence:
    return Sequence(request_id=rid, prompt=prompt, max_tokens=n, arrival_s=0.0, adapters=adapters)


def config(**kw: int) -> EngineConfig:
    base = {"max_concurrent": 4, "max_batch_tokens": 16, "max_input_tokens": 64, "max_total_tokens": 128}
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


def step(s: Scheduler) -> list[str]:
    plan = s.schedule(0.0)
    assert len({i.seq.adapters for i in plan.items}) <= 1, "a step mixes adapter sets"
    assert all(i.seq.adapters == plan.adapters for i in plan.items)
    s.postprocess(plan, {i.seq.request_id: [7] for i in plan.items if i.sample}, 0.0)
    return sorted(i.seq.request_id for i in plan.items)


def test_steps_carry_one_adapter_set_and_rotate_between_sets() -> None:
    s = Scheduler(config())
    for sq in (seq("base1", [1, 2]), seq("base2", [3, 4]), seq("a1", [5, 6], A), seq("b1", [8, 9], B)):
        s.add(sq)
    served = [step(s) for _ in range(6)]
    # sets in a fixed order, each once per round: base (both its sequences together), a, b
    assert served == [["base1", "base2"], ["a1"], ["b1"], ["base1", "base2"], ["a1"], ["b1"]]


def test_a_set_that_runs_out_of_work_leaves_the_rotation() -> None:
    s = Scheduler(config())
    s.add(seq("base", [1, 2], n=1))
    s.add(seq("a", [5, 6], A, n=8))
    assert step(s) == ["base"]
    s.finish(s.running[0])  # base is done after its one token
    assert [step(s) for _ in range(3)] == [["a"], ["a"], ["a"]]


def test_prefix_cache_never_shares_kv_across_adapter_sets() -> None:
    cache = PrefixCache(n_running=2)
    prompt = list(range(20))
    first = cache.acquire(prompt, [], adapters=A)
    cache.release(first.kv_seq, prompt, reusable=True, adapters=A)
    # the same prompt under another set (or none) finds nothing; under the same set, the prefix
    other = cache.acquire(prompt, [], adapters=B)
    assert other.ops == () and other.kv_seq == 1
    assert cache.best_match(prompt, [], ()) == (-1, 0, False)
    cache.release(other.kv_seq, [], reusable=False, adapters=B)
    again = cache.acquire(prompt, [], adapters=A)
    assert again.n_reused == 19 and again.ops == (KvKeep(0, 19),)


def test_a_finished_sequence_does_not_supersede_another_sets_slot() -> None:
    cache = PrefixCache(n_running=1, n_extra=1)
    m = cache.acquire([1, 2, 3], [], adapters=A)
    cache.release(m.kv_seq, [1, 2, 3], True, adapters=A)
    m = cache.acquire([1, 2, 3, 4], [], adapters=B)
    ops = cache.release(m.kv_seq, [1, 2, 3, 4], True, adapters=B)
    assert cache.held_seqs == 2 and ops == []  # kept beside A's, not in place of it
    assert cache.best_match([1, 2, 3, 9], [], A)[1] == 3 and cache.best_match([1, 2, 3, 4, 5], [], B)[1] == 4


def test_an_evicted_entry_is_saved_under_its_adapter_set() -> None:
    cache = PrefixCache(n_running=1, spill_min_tokens=4)
    m = cache.acquire(list(range(10)), [], adapters=A)
    cache.release(m.kv_seq, list(range(10)), True, adapters=A)
    m = cache.acquire(list(range(50, 60)), [], adapters=())
    saves = [op for op in m.ops if isinstance(op, KvSave)]
    assert [s.adapters for s in saves] == [A]


def test_host_cache_states_are_only_served_under_their_adapter_set() -> None:
    s = Scheduler(config(), HostCache(2**20, min_tokens=4), StateKey("m"))
    host = s.host
    assert host is not None
    tokens = list(range(32))
    host.store(s.state_key_for(A), tokens, b"x" * 100)
    assert host.lookup(s.state_key_for(A), [*tokens, 99]) is not None
    assert host.lookup(s.state_key_for(B), [*tokens, 99]) is None
    assert host.lookup(s.state_key_for(()), [*tokens, 99]) is None
    # admitted under another set, a prompt restores nothing
    other = seq("b", [*tokens, 99], B)
    s.add(other)
    plan = s.schedule(0.0)
    assert other.n_reused == 0 and plan.kv_ops == []


def test_adapter_sets_are_canonical() -> None:
    assert adapter_set([("b", 0.5), ("a", 1), ("z", 0.0)]) == (("a", 1.0), ("b", 0.5))
    assert label(()) == "" and label(A) != label((("a", 0.5),))


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("sql=/m/sql.gguf", ("sql", "/m/sql.gguf", 1.0)),
        ("sql=/m/sql.gguf:0.5", ("sql", "/m/sql.gguf", 0.5)),
        ("x=s3://bucket/a.gguf", ("x", "s3://bucket/a.gguf", 1.0)),
        ("x=s3://bucket/a.gguf:2", ("x", "s3://bucket/a.gguf", 2.0)),
    ],
)
def test_lora_option_parses(text: str, parsed: tuple[str, str, float]) -> None:
    assert parse_lora(text) == parsed


@pytest.mark.parametrize("text", ["sql", "=a.gguf", "sql="])
def test_lora_option_without_name_or_path_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="NAME=PATH"):
        parse_lora(text)


def test_adapter_names_are_checked() -> None:
    with pytest.raises(ValueError, match="letters"):
        AdapterSpec("bad name", "/a.gguf")
    with pytest.raises(ValueError, match="given twice"):
        EngineConfig(adapters=(AdapterSpec("a", "/1.gguf"), AdapterSpec("a", "/2.gguf")))
