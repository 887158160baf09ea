"""A prefix shared with a long sequence, on a model with sliding-window layers (Gemma 3: 512 back).

Every sequence has a KV stream of its own, so no other sequence's tokens take a long idle sequence's
first cells (they did in one shared buffer: llama.cpp counts a cell more than a window behind its
sequence's last position as free). A prompt sharing the first 600 tokens of a 900-token conversation
copies them and answers as a cold prefill does, and the conversation's own next turn reuses all of it."""

from __future__ import annotations

from llmhost.bench.load.workload import builtin_prompts
from llmhost.engine import (
    Engine,
    EngineConfig,
    LlamaModel,
)
from llmhost.store import resolve_model
from tests.integration.engine_runs import logprobs_of, run_greedy
from tests.integration.neartie import assert_same_or_near_tie


def engine(prefix_cache_seqs: int) -> Engine:
    cfg = EngineConfig(
        max_concurrent=2,
        max_total_tokens=1024,
        max_input_tokens=1000,
        max_batch_tokens=256,
        n_threads=1,
        prefix_cache_seqs=prefix_cache_seqs,
        prompt_cache_mb=0,
        swa_full=True,
    )
    return Engine(LlamaModel(resolve_model(), cfg), cfg)


def test_a_long_idle_sequence_keeps_its_first_cells_and_serves_a_shorter_prefix() -> None:
    eng = engine(prefix_cache_seqs=3)
    model = eng.model
    assert model.swa_window == 512
    text = model.tokenize(" ".join(t for t, _ in builtin_prompts()) * 20, add_special=False)
    long, other = text[1000:1900], text[5000:5300]
    run_greedy(eng, "long", long, 1)
    run_greedy(eng, "other", other, 1)
    idle = {model.seq_len(s): s for s in range(eng.config.n_seq_max)}[len(long)]
    assert model.kv_floor(idle) == 0, "the idle conversation lost cells"
    follow = long[:600] + text[7000:7050]
    warm = run_greedy(eng, "follow", follow, 12)
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n == 600
    own = run_greedy(eng, "own", long + text[8000:8020], 1)[-1].timings
    assert own is not None and own.cache_n == len(long)
    eng.close()
    cold_engine = engine(prefix_cache_seqs=0)
    cold = run_greedy(cold_engine, "follow", follow, 12)
    cold_engine.close()
    assert_same_or_near_tie(logprobs_of(cold), logprobs_of(warm))
