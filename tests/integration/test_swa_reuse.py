"""A prefix shared with a long sequence, on a model with sliding-window layers (Gemma 3: 512 back).

Every sequence has a KV stream of its own, so no other sequence's tokens take a long idle sequence's
first cells (they did in one shared buffer: llama.cpp counts a cell more than a window behind its
sequence's last position as free). A prompt sharing the first 600 tokens of a 900-token conversation
copies them and answers as a cold prefill does, and the conversation's own next turn reuses all of it."""

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
        prefix_cache_seqs=prefix_cache_seqs, prompt_cache_mb=0,
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


def test_a_long_idle_sequence_keeps_its_first_cells_and_serves_a_shorter_prefix() -> None:
    eng = engine(prefix_cache_seqs=3)
    model = eng.model
    assert model.swa_window == 512
    text = model.tokenize(" ".join(t for t, _ in builtin_prompts()) * 20, add_special=False)
    long, other = text[1000:1900], text[5000:5300]
    run(eng, "long", long)
    run(eng, "other", other)
    idle = {model.seq_len(s): s for s in range(eng.config.n_seq_max)}[len(long)]
    assert model.kv_floor(idle) == 0, "the idle conversation lost cells"
    follow = long[:600] + text[7000:7050]
    warm = run(eng, "follow", follow, 12)
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n == 600
    own = run(eng, "own", long + text[8000:8020])[-1].timings
    assert own is not None and own.cache_n == len(long)
    eng.close()
    cold_engine = engine(prefix_cache_seqs=0)
    cold = run(cold_engine, "follow", follow, 12)
    cold_engine.close()
    assert_same_or_near_tie(logprobs(cold), logprobs(warm))
