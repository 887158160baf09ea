"""Prefix-aware routing's choice (llmhost.endpoint.affinity): the prompt text it keys on, chained block
hashes, the longest match, the load bound, the fallback, and the component's pick."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from llmhost.endpoint.affinity import (
    Affinity,
    Decision,
    PrefixIndex,
    block_hashes,
    choose,
    over_bound,
    prompt_text,
)
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.placement import Allocation
from llmhost.endpoint.control.replica import Replica, ReplicaState
from llmhost.endpoint.spec import ComponentSpec, SpecError, parse_endpoint
from llmhost.store import ResolvedModel

SYSTEM = "You are a careful assistant. " * 20  # 580 characters: two full blocks of 256


def completion(prompt: str) -> bytes:
    return json.dumps({"model": "m", "prompt": prompt}).encode()


def test_prompt_text_of_each_api() -> None:
    assert prompt_text(completion("hello")) == "hello"
    chat = {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "Q"}]},
        ]
    }
    assert prompt_text(json.dumps(chat).encode()) == "<system>S\n<user>Q\n"
    anthropic = {"system": "S", "messages": [{"role": "user", "content": "Q"}]}
    assert prompt_text(json.dumps(anthropic).encode()) == "<system>S\n<user>Q\n"
    assert prompt_text(json.dumps({"inputs": "tgi"}).encode()) == "tgi"
    assert prompt_text(json.dumps({"prompt": ["first", "second"]}).encode()) == "first"
    assert prompt_text(b"not json") is None and prompt_text(b"[1]") is None and prompt_text(b"{}") is None


def test_chat_turns_extend_the_previous_turn_text() -> None:
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]
    turn2 = [*turn1, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "More"}]
    t1 = prompt_text(json.dumps({"messages": turn1}).encode())
    t2 = prompt_text(json.dumps({"messages": turn2}).encode())
    assert t1 and t2 and t2.startswith(t1)


def test_block_hashes_are_chained_over_full_blocks() -> None:
    a = block_hashes("x" * 100 + "y" * 100, 64, 100)
    assert len(a) == 3  # the partial fourth block is not hashed
    b = block_hashes("x" * 100 + "y" * 100 + "z" * 500, 64, 100)
    assert b[:3] == a and len(b) == 10
    assert block_hashes("z" + "x" * 99 + "y" * 100, 64, 100)[1] != a[1]  # a block's hash covers what precedes
    assert len(block_hashes("x" * 1000, 64, 4)) == 4
    assert block_hashes("short", 64, 100) == []


def test_index_matches_the_deepest_block_per_copy_and_forgets_lru() -> None:
    index = PrefixIndex(capacity=5)
    hashes = block_hashes("a" * 40, 10, 100)
    index.record(hashes[:2], "A")
    index.record(hashes, "B")  # B was sent the whole prompt since: every block is now B's
    assert index.matches(hashes) == {"B": 4}
    index.record(block_hashes("b" * 30, 10, 100), "C")  # 3 more blocks: capacity 5 evicts the oldest
    assert len(index) == 5
    assert index.matches(hashes) == {"B": 4}  # blocks 3 and 4 are left: B still holds the deepest
    index.forget("B")
    assert index.matches(hashes) == {}


def _least(loads: dict[str, float]) -> Callable[[Sequence[str]], str]:
    return lambda cs: min(cs, key=loads.__getitem__)


def _choose(loads: dict[str, float], matched: dict[str, int], factor: float = 0.25) -> tuple[str, Decision]:
    return choose(list(loads), str, loads.__getitem__, matched, factor, _least(loads))


def test_choose_longest_match_within_the_load_bound() -> None:
    assert _choose({"A": 2, "B": 0}, {"A": 3, "B": 1}) == ("A", Decision.PREFIX)
    assert _choose({"A": 0, "B": 0}, {}) == ("A", Decision.COLD)
    assert _choose({"A": 5, "B": 0}, {}) == ("B", Decision.COLD)  # least outstanding
    # A holds the longest prefix but is over (1 + 0.25) × 2.5 + 1 = 4.125: B holds a shorter one
    assert _choose({"A": 5, "B": 0}, {"A": 3, "B": 1}) == ("B", Decision.SPILLED)
    # no other copy holds any: least outstanding
    assert _choose({"A": 5, "B": 1, "C": 0}, {"A": 3}) == ("C", Decision.SPILLED)
    # a match held only by a copy that may not take it (not a candidate)
    assert _choose({"B": 1, "C": 0}, {"A": 3}) == ("C", Decision.SPILLED)
    # equal matches: fewer outstanding first
    assert _choose({"A": 2, "B": 1}, {"A": 2, "B": 2}) == ("B", Decision.PREFIX)


def test_load_bound() -> None:
    assert over_bound(3, [3, 0], 0.25)  # 3 > 1.25 × 1.5 + 1 = 2.875
    assert not over_bound(2, [2, 0], 0.25)  # 2 <= 1.25 × 1 + 1
    assert not over_bound(1, [1, 0], 0.0)  # 1 <= 0.5 + 1
    assert over_bound(3, [3, 0], 0.0)  # 3 > 1.5 + 1
    assert not over_bound(0, [], 0.25)


def test_a_hot_prefix_spreads_once_over_the_bound() -> None:
    affinity = Affinity(block_chars=64, load_factor=0.25)
    loads = {"A": 0.0, "B": 0.0}
    hashes = affinity.hashes(completion(SYSTEM + "question"))
    chosen = []
    for _ in range(8):  # none finishes: the load grows on the copy the prefix is on until it is over
        c = affinity.pick(hashes, list(loads), str, loads.__getitem__, _least(loads))
        loads[c] += 1
        chosen.append(c)
    assert chosen[0] == chosen[1]  # the second goes where the first went
    assert set(chosen) == {"A", "B"}
    assert max(loads.values()) - min(loads.values()) <= 3  # bounded: (1 + 0.25) × mean + 1
    assert affinity.decisions[Decision.COLD] == 1 and affinity.decisions[Decision.PREFIX] >= 2


def _component(tmp: Path, copies: int, **routing: object) -> Component:
    spec = ComponentSpec(name="m", routing=routing)  # type: ignore[arg-type]
    comp = Component(spec, ResolvedModel(tmp / "model.gguf"))
    for _ in range(copies):
        alloc = Allocation((0,), 1.0, 1, 100)
        r = Replica(spec, comp.new_index(), comp.model, alloc, tmp, on_change=comp.notify)
        r.state = ReplicaState.READY
        comp.replicas.append(r)
    return comp


def _turns(user: str) -> Sequence[bytes]:
    prompt = f"{SYSTEM}\n\nUser: {user}\nAssistant:"
    turn2 = prompt + " an answer\nUser: and then?\nAssistant:"
    return completion(prompt), completion(turn2)


def test_a_conversation_stays_on_its_copy(tmp_path: Path) -> None:
    comp = _component(tmp_path, 2, policy="prefix", block_chars=64)
    first, second = _turns("user one")
    a = comp.pick(prefix=comp.prefix_hashes(first))
    assert a is not None
    a.outstanding += 1  # the first turn still in flight: least outstanding would pick the other copy
    b = comp.pick(prefix=comp.prefix_hashes(second))
    assert b is a
    assert comp.affinity is not None and comp.affinity.decisions[Decision.PREFIX] == 1
    assert comp.status()["routing"] == "prefix"


def test_least_outstanding_is_the_default(tmp_path: Path) -> None:
    comp = _component(tmp_path, 2)
    assert comp.affinity is None and comp.prefix_hashes(completion(SYSTEM)) == []
    first, second = _turns("user one")
    a = comp.pick(prefix=comp.prefix_hashes(first))
    assert a is not None
    a.outstanding += 1
    assert comp.pick(prefix=comp.prefix_hashes(second)) is not a


def test_routing_settings_are_checked() -> None:
    base = {"name": "e", "components": [{"name": "m"}]}
    spec = parse_endpoint(base)
    assert spec.components[0].routing.policy == "least_outstanding"
    for bad, word in (
        ({"policy": "random"}, "policy"),
        ({"block_chars": 4}, "block_chars"),
        ({"load_factor": -1}, "load_factor"),
        ({"nope": 1}, "unknown key"),
    ):
        with pytest.raises(SpecError, match=word):
            parse_endpoint({"name": "e", "components": [{"name": "m", "routing": bad}]})
