"""KV streams and the host-memory tier in one step, on the real model.

A finished request's KV is copied to an idle stream by llama.cpp at the next decode. A request admitted
in the same step into the slot it left, restoring a state from host memory, must not have that state
overwritten by (or copied into) the pending copy: llama.cpp is made to do the copy first. Both the
restored request and the conversation kept idle then answer as a cold prefill does."""

from __future__ import annotations

from llmhost.bench.workload import builtin_prompts
from llmhost.engine import (
    Engine,
    EngineConfig,
    LlamaModel,
)
from llmhost.store import resolve_model
from tests.integration.engine_runs import logprobs_of, run_greedy
from tests.integration.neartie import assert_same_or_near_tie


def engine(prefix_cache_seqs: int, prompt_cache_mb: int) -> Engine:
    cfg = EngineConfig(
        max_concurrent=1, max_total_tokens=512, max_input_tokens=400, max_batch_tokens=256, n_threads=1,
        prefix_cache_seqs=prefix_cache_seqs, prompt_cache_mb=prompt_cache_mb,
    )  # fmt: skip
    return Engine(LlamaModel(resolve_model(), cfg), cfg)


def test_a_state_restored_into_a_slot_whose_kv_is_being_copied_leaves_both_right() -> None:
    eng = engine(prefix_cache_seqs=1, prompt_cache_mb=64)
    text = eng.model.tokenize(" ".join(t for t, _ in builtin_prompts()) * 10, add_special=False)
    p1, p2, p3 = text[:120], text[400:500], text[800:900]
    for rid, prompt in (("p1", p1), ("p2", p2), ("p3", p3)):
        run_greedy(eng, rid, prompt, 2)  # each takes the one idle stream: p1, then p2, go to host memory
    # p3's copy to the idle stream waits for a decode; f1 restores p1's state into the slot p3 left
    follow1, follow3 = [*p1, *text[1200:1210]], [*p3, *text[1300:1310]]
    warm1 = run_greedy(eng, "f1", follow1, 8)
    assert eng.model.copies_done_early == 1
    warm3 = run_greedy(eng, "f3", follow3, 8)
    t1, t3 = warm1[-1].timings, warm3[-1].timings
    assert t1 is not None and t1.cache_n >= len(p1), "restored from host memory"
    assert t3 is not None and t3.cache_n >= len(p3), "copied from the idle stream"
    eng.close()
    cold_engine = engine(prefix_cache_seqs=0, prompt_cache_mb=0)
    cold1, cold3 = run_greedy(cold_engine, "f1", follow1, 8), run_greedy(cold_engine, "f3", follow3, 8)
    cold_engine.close()
    assert_same_or_near_tie(logprobs_of(cold1), logprobs_of(warm1))
    assert_same_or_near_tie(logprobs_of(cold3), logprobs_of(warm3))
