"""The KV cache in quantized types and with sliding-window layers at their window, on the real model.

Gemma 3 270M: 18 layers, 5 of each 6 with a 512-position window, one KV head of 256 values. The KV
llama.cpp allocates follows the types (q8_0 packs 32 values in 34 bytes, q4_0 in 18) and the window
(15 layers hold the window and a micro-batch a stream instead of the whole stream). Windowed, a
conversation's own next turn still reuses all of its KV; a prompt sharing only a shorter prefix (whose
window positions are gone from the cells) restores the newest SWA checkpoint at or before it and
prefills the rest, giving what a cold engine gives."""

from __future__ import annotations

import pytest

from llmhost.bench.load.workload import builtin_prompts
from llmhost.engine import (
    Engine,
    EngineConfig,
    GenerationEvent,
    GenerationRequest,
    LlamaModel,
    SamplingParams,
)
from llmhost.engine.kv.memory_fit import gguf_kv_bytes, gguf_kv_shape, stream_bytes
from llmhost.engine.llamacpp.gguf_check import check_file
from llmhost.store import resolve_model
from tests.integration.engine_runs import logprobs_of, run_greedy
from tests.integration.neartie import assert_same_or_near_tie


def engine(prefix_cache_seqs: int = 2, **kv: object) -> Engine:
    cfg = EngineConfig(
        max_concurrent=2,
        max_total_tokens=2048,
        max_input_tokens=1800,
        max_batch_tokens=256,
        n_threads=1,
        prefix_cache_seqs=prefix_cache_seqs,
        prompt_cache_mb=0,
        flash_attn=True,
        **kv,  # type: ignore[arg-type]
    )
    return Engine(LlamaModel(resolve_model(), cfg), cfg)


def text_tokens(eng: Engine) -> list[int]:
    return eng.model.tokenize(" ".join(t for t, _ in builtin_prompts()) * 20, add_special=False)


@pytest.mark.parametrize(
    ("types", "swa_full", "mib"),
    [
        # 4 streams x 2,048 cells x 18 layers x 512 values: 2 bytes each (f16), 34/32 (q8_0), 18/32 (q4_0)
        # (144 MiB in f16)
        (("q8_0", "q8_0"), True, 76.5),
        (("q4_0", "f16"), True, 92.25),
        # windowed: 3 full layers (24 MiB in f16) + 15 layers of 512 + 256 cells a stream (the window and
        # a micro-batch of --max-batch-tokens 256): 45 MiB
        (("f16", "f16"), False, 69.0),
    ],
)
def test_the_kv_cache_takes_what_its_types_and_window_say(
    types: tuple[str, str], swa_full: bool, mib: float
) -> None:
    eng = engine(cache_type_k=types[0], cache_type_v=types[1], swa_full=swa_full)
    assert eng.model.kv_mib == pytest.approx(mib, rel=1e-3)  # llama.cpp aligns buffers
    # what an endpoint estimates from the file's header without llama.cpp is what the engine counts
    metadata = check_file(resolve_model()).metadata
    assert gguf_kv_bytes(metadata, *types) == eng.model.kv_bytes_per_token
    assert gguf_kv_shape(metadata, *types) == eng.model.kv_shape
    if swa_full:
        computed = eng.config.n_ctx * eng.model.kv_bytes_per_token / 2**20
        assert eng.model.kv_mib == pytest.approx(computed, rel=1e-3)
    # the memory fit's count of a stream (its SWA checkpoints counted apart) is what llama.cpp allocates
    shape = eng.model.kv_shape
    assert (shape.layers, shape.swa_layers, shape.swa_window) == (18, 15, 512)
    assert eng.config.n_seq_max * stream_bytes(eng.config, shape) / 2**20 == pytest.approx(mib, rel=1e-3)
    prompt = text_tokens(eng)[:300]
    out = run_greedy(eng, "a", prompt, 8)
    eng.close()
    assert sum(len(e.token_ids) for e in out) == 8 and out[-1].error is None


def test_q8_0_kv_batches_as_it_runs_alone() -> None:
    eng = engine(cache_type_k="q8_0", cache_type_v="q8_0")
    text = text_tokens(eng)
    alone = run_greedy(eng, "alone", text[:200], 16)
    eng.close()
    eng = engine(cache_type_k="q8_0", cache_type_v="q8_0")
    events: dict[str, list[GenerationEvent]] = {"x": [], "y": []}
    params = SamplingParams(max_tokens=16, temperature=0.0, logprobs=5, ignore_eos=True)
    eng.add(GenerationRequest("x", text[:200], params))
    eng.add(GenerationRequest("y", text[500:650], params))
    while eng.has_work:
        for event in eng.step():
            events[event.request_id].append(event)
    eng.close()
    assert_same_or_near_tie(logprobs_of(alone), logprobs_of(events["x"]))


def test_a_windowed_cache_reuses_a_conversation_and_a_shorter_shared_prefix_from_a_checkpoint() -> None:
    eng = engine(swa_full=False)
    text = text_tokens(eng)
    long = text[1000:1900]
    run_greedy(eng, "long", long, 1)
    own = run_greedy(eng, "own", long + text[8000:8020], 1)[-1].timings
    assert own is not None and own.cache_n == len(long)
    follow = long[:300] + text[7000:7050]
    warm = run_greedy(eng, "follow", follow, 12)
    timings = warm[-1].timings
    # positions 0-299's window is gone from the cells: the checkpoint at 256 (one per 256-token chunk)
    assert timings is not None and timings.cache_n == 256
    assert eng.stats().swa_checkpoints_restored == 1
    eng.close()
    cold_engine = engine(swa_full=False, prefix_cache_seqs=0)
    cold = run_greedy(cold_engine, "follow", follow, 12)
    cold_engine.close()
    assert_same_or_near_tie(logprobs_of(cold), logprobs_of(warm))
