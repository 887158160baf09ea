"""A prefix shared with a sequence whose sliding-window KV cells llama.cpp gave to another sequence.

Gemma 3's sliding-window layers attend 512 positions back. llama.cpp treats a cell of a position more
than a window behind its sequence's last one as free for other sequences' tokens (its find_slot), even
in a full-size SWA cache, so an idle sequence of 900 tokens can lose the sliding-window KV of its first
positions while its full-attention KV stays. A later prompt sharing those first 600 tokens must not be
computed on what is left: the engine does not reuse it, and answers as a cold prefill."""

from __future__ import annotations

from typing import Any

from llmhost.bench.workload import builtin_prompts
from llmhost.engine import (
    Engine,
    EngineConfig,
    GenerationEvent,
    GenerationRequest,
    LlamaModel,
    SamplingParams,
)
from llmhost.store import resolve_model
from tests.integration.neartie import assert_same_or_near_tie


def engine(prefix_cache_seqs: int) -> Engine:
    cfg = EngineConfig(
        max_concurrent=2, max_total_tokens=1024, max_input_tokens=1000, max_batch_tokens=256, n_threads=1,
        prefix_cache_seqs=prefix_cache_seqs, prefix_cache_tokens=1024, prompt_cache_mb=0,
    )  # fmt: skip
    return Engine(LlamaModel(resolve_model(), cfg), cfg)


def run(eng: Engine, rid: str, prompt: list[int], n: int = 1) -> list[GenerationEvent]:
    events: list[GenerationEvent] = []
    params = SamplingParams(max_tokens=n, temperature=0.0, logprobs=5, ignore_eos=True)
    eng.add(GenerationRequest(rid, prompt, params), events.append)
    while eng.has_work:
        eng.step()
    return events


def logprobs(events: list[GenerationEvent]) -> dict[str, Any]:
    lps = [lp for ev in events for lp in ev.logprobs]
    return {
        "tokens": [str(lp.token) for lp in lps],
        "top_logprobs": [{str(t): v for t, v in lp.top} for lp in lps],
    }


def test_a_prefix_whose_window_cells_went_to_another_sequence_is_prefilled_again() -> None:
    eng = engine(prefix_cache_seqs=3)
    model = eng.model
    assert model.swa_window == 512
    text = model.tokenize(" ".join(t for t, _ in builtin_prompts()) * 20, add_special=False)
    first, long, other = text[:100], text[1000:1900], text[5000:5300]
    run(eng, "first", first)  # cells 0-99
    run(eng, "long", long)  # cells 100-999
    held = {model.seq_len(s): s for s in range(eng.config.n_seq_max)}
    for op in eng.scheduler.cache.drop(held[len(first)]):  # evicted: llama.cpp looks for cells from 0 again
        model.apply(op)
    run(eng, "other", other)  # 300 cells: the 100 free ones, then "long"'s window-masked ones
    long_kv = held[len(long)]
    assert not model.holds_context(long_kv, 600), "llama.cpp kept every cell: nothing to test"
    follow = long[:600] + text[7000:7050]
    warm = run(eng, "follow", follow, 12)
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n == 0, "computed on a prefix missing window cells"
    # the long sequence was not taken over for a prefix it could not serve: its own next turn, which
    # attends only to its last window, still finds all of it
    assert model.seq_len(long_kv) == len(long)
    own = run(eng, "own", long + text[8000:8020])[-1].timings
    assert own is not None and own.cache_n == len(long)
    eng.close()
    cold_engine = engine(prefix_cache_seqs=0)
    cold = run(cold_engine, "follow", follow, 12)
    cold_engine.close()
    assert_same_or_near_tie(logprobs(cold), logprobs(warm))
