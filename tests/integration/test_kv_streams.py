"""KV streams and the host-memory tier on the real model.

With one slot, each conversation takes the one before it out of the context: its KV state goes to
host memory, and comes back into the slot for its next turn, which answers as a cold prefill does. A
sequence moved between streams goes on as if it had never moved."""

from __future__ import annotations

from llmhost.bench.load.workload import builtin_prompts
from llmhost.engine import (
    Engine,
    EngineConfig,
    GenerationEvent,
    GenerationRequest,
    LlamaModel,
    SamplingParams,
)
from llmhost.store import resolve_model
from tests.integration.engine_runs import logprobs_of, run_greedy
from tests.integration.neartie import assert_same_or_near_tie


def engine(prefix_cache_seqs: int, prompt_cache_mb: int) -> Engine:
    cfg = EngineConfig(
        max_concurrent=1,
        max_total_tokens=512,
        max_input_tokens=400,
        max_batch_tokens=256,
        n_threads=1,
        prefix_cache_seqs=prefix_cache_seqs,
        prompt_cache_mb=prompt_cache_mb,
    )
    return Engine(LlamaModel(resolve_model(), cfg), cfg)


def test_conversations_evicted_from_the_one_slot_come_back_from_host_memory_as_computed() -> None:
    eng = engine(prefix_cache_seqs=0, prompt_cache_mb=64)
    text = eng.model.tokenize(" ".join(t for t, _ in builtin_prompts()) * 10, add_special=False)
    p1, p2, p3 = text[:120], text[400:500], text[800:900]
    for rid, prompt in (("p1", p1), ("p2", p2), ("p3", p3)):
        run_greedy(eng, rid, prompt, 2)  # each takes the one slot: p1, then p2, go to host memory
    # f1 restores p1's state into the slot, p3's going to host memory; f3 then restores p3's
    follow1, follow3 = [*p1, *text[1200:1210]], [*p3, *text[1300:1310]]
    warm1 = run_greedy(eng, "f1", follow1, 8)
    warm3 = run_greedy(eng, "f3", follow3, 8)
    t1, t3 = warm1[-1].timings, warm3[-1].timings
    assert t1 is not None and t1.cache_n >= len(p1), "restored from host memory"
    assert t3 is not None and t3.cache_n >= len(p3), "restored from host memory"
    assert eng.stats().prompt_cache_hits == 2
    eng.close()
    cold_engine = engine(prefix_cache_seqs=0, prompt_cache_mb=0)
    cold1 = run_greedy(cold_engine, "f1", follow1, 8)
    cold_engine.close()
    cold_engine = engine(prefix_cache_seqs=0, prompt_cache_mb=0)
    cold3 = run_greedy(cold_engine, "f3", follow3, 8)
    cold_engine.close()
    assert_same_or_near_tie(logprobs_of(cold1), logprobs_of(warm1))
    assert_same_or_near_tie(logprobs_of(cold3), logprobs_of(warm3))


def test_a_sequence_moved_to_a_lower_stream_answers_as_it_would_alone() -> None:
    """The second of three requests ends early; the third then moves down into the stream it left (so
    the step's streams run consecutively) and goes on from the copy as if it had never moved."""
    cfg = EngineConfig(
        max_concurrent=3,
        max_total_tokens=256,
        max_input_tokens=200,
        max_batch_tokens=256,
        n_threads=1,
        prefix_cache_seqs=0,
        prompt_cache_mb=0,
        prefix_caching=False,  # "alone" below computes its prompt, not c's KV kept in its slot
    )
    eng = Engine(LlamaModel(resolve_model(), cfg), cfg)
    text = eng.model.tokenize(" ".join(t for t, _ in builtin_prompts()) * 4, add_special=False)
    prompts = [text[:40], text[100:150], text[300:360]]
    events: dict[str, list[GenerationEvent]] = {}
    for rid, prompt, n in zip("abc", prompts, (12, 2, 12), strict=True):
        params = SamplingParams(max_tokens=n, temperature=0.0, logprobs=5, ignore_eos=True)
        eng.add(GenerationRequest(rid, prompt, params))
    c_streams: list[int] = []
    while eng.has_work:
        for event in eng.step():
            events.setdefault(event.request_id, []).append(event)
        c_streams += [s.kv_seq for s in eng.scheduler.running if s.request_id == "c"]
    assert c_streams[0] == 2 and c_streams[-1] == 1, f"c never moved down to stream 1: {c_streams}"
    alone = run_greedy(eng, "c-alone", prompts[2], 12)
    eng.close()
    assert_same_or_near_tie(logprobs_of(alone), logprobs_of(events["c"]))
