"""The architectures llama.cpp runs, each on the real engine: a tiny random-weight GGUF of each
(tests/tinymodels.py) loads, decodes 4 sequences in one batch to the greedy tokens each gets alone,
reuses a cached prefix, and saves a sequence's state to host memory and restores it, each answering as
a cold prefill does (or diverging only at a near tie: tests/integration/neartie.py).

docs/guides/supported-models.md names these tests row by row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmhost.engine import (
    Engine,
    EngineConfig,
    GenerationEvent,
    GenerationRequest,
    LlamaModel,
    SamplingParams,
)
from llmhost.engine.embedder import EmbedderConfig, load_embedder
from tests.integration.engine_runs import logprobs_of, run_greedy
from tests.integration.neartie import assert_same_or_near_tie
from tests.tinymodels import build_tiny_gguf

DECODERS = ["llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "granite", "gpt-oss"]
PROMPTS = [
    "The history of the Roman Empire begins",
    "List three uses of copper:",
    "def fibonacci(n):",
    "Photosynthesis is the process by which plants turn light, water and air into",
]
# long enough to pass the tiny Gemma 3 and gpt-oss sliding windows (128 positions)
PREFIX = " ".join(f"Rule {i}: the harbour keeps berth {i} free for grain ships." for i in range(20))
N = 12


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-archs")


def tiny(gguf_dir: Path, arch: str) -> Path:
    path = gguf_dir / f"{arch}.gguf"
    return path if path.exists() else build_tiny_gguf(path, arch=arch)


def engine(
    path: Path, prefix_cache_seqs: int = 1, prompt_cache_mb: int = 0, max_concurrent: int = 4
) -> Engine:
    cfg = EngineConfig(
        max_concurrent=max_concurrent,
        max_total_tokens=512,
        max_input_tokens=448,
        max_batch_tokens=512,
        n_threads=1,
        prefix_cache_seqs=prefix_cache_seqs,
        prompt_cache_mb=prompt_cache_mb,
    )
    return Engine(LlamaModel(path, cfg), cfg)


def run_together(eng: Engine, prompts: list[list[int]], n: int) -> list[list[GenerationEvent]]:
    """All prompts added before the first step: they are prefilled and decoded in shared steps."""
    events: list[list[GenerationEvent]] = [[] for _ in prompts]
    params = SamplingParams(max_tokens=n, temperature=0.0, logprobs=5, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        eng.add(GenerationRequest(f"r{i}", prompt, params))
    while eng.has_work:
        for event in eng.step():
            events[int(event.request_id[1:])].append(event)
    return events


@pytest.mark.parametrize("arch", DECODERS)
def test_loads_and_batches_four_sequences_to_their_greedy_tokens_alone(gguf_dir: Path, arch: str) -> None:
    eng = engine(tiny(gguf_dir, arch), prefix_cache_seqs=0)
    try:
        assert eng.model.info.description.startswith(f"{arch} ")
        prompts = [eng.model.tokenize(p) for p in PROMPTS]
        alone = [logprobs_of(run_greedy(eng, f"alone{i}", p, N)) for i, p in enumerate(prompts)]
        steps_alone = eng.steps
        together = run_together(eng, prompts, N)
        # decoded one by one, 4 x 12 tokens take at least 48 steps
        assert eng.steps - steps_alone < 4 * N / 2, "the 4 sequences did not share decode steps"
    finally:
        eng.close()
    for one, batched in zip(alone, together, strict=True):
        assert len(one["tokens"]) == N
        assert_same_or_near_tie(one, logprobs_of(batched))


@pytest.mark.parametrize("arch", DECODERS)
def test_a_shared_prefix_is_reused_and_answers_as_a_cold_prefill(gguf_dir: Path, arch: str) -> None:
    path = tiny(gguf_dir, arch)
    eng = engine(path)
    try:
        first = eng.model.tokenize(PREFIX + "\nQuestion: which berth is free?")
        second = eng.model.tokenize(PREFIX + "\nQuestion: how many rules are there?")
        shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
        assert shared > 2 * 128
        run_greedy(eng, "first", first, 2)
        warm = run_greedy(eng, "second", second, N)
    finally:
        eng.close()
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n == shared
    cold_engine = engine(path, prefix_cache_seqs=0)
    try:
        cold = run_greedy(cold_engine, "second", second, N)
    finally:
        cold_engine.close()
    assert cold[-1].timings is not None and cold[-1].timings.cache_n == 0
    assert_same_or_near_tie(logprobs_of(cold), logprobs_of(warm))


@pytest.mark.parametrize("arch", DECODERS)
def test_a_saved_state_is_restored_and_answers_as_a_cold_prefill(gguf_dir: Path, arch: str) -> None:
    """A finished conversation pushed out of the context by another is saved to host memory
    (llama_state_seq_get_data); its next turn restores it (llama_state_seq_set_data) instead of
    prefilling it again."""
    path = tiny(gguf_dir, arch)
    eng = engine(path, prefix_cache_seqs=0, prompt_cache_mb=16, max_concurrent=1)  # one slot
    try:
        turn1 = eng.model.tokenize(PREFIX + "\nUser: which berth is free for grain?\nAssistant:")
        answer = [t for ev in run_greedy(eng, "a1", turn1, 8) for t in ev.token_ids]
        run_greedy(eng, "b1", eng.model.tokenize("Note 1: the library lends books for two weeks."), 8)
        assert eng.stats().prompt_cache_stores >= 1, "the first conversation was not saved"
        turn2 = turn1 + answer + eng.model.tokenize("\nUser: and for timber?\nAssistant:")
        warm = run_greedy(eng, "a2", turn2, N)
        stats = eng.stats()
    finally:
        eng.close()
    assert stats.prompt_cache_hits == 1
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n >= len(turn1)
    assert stats.prompt_cache_restored_tokens == timings.cache_n
    cold_engine = engine(path, prefix_cache_seqs=0)
    try:
        cold = run_greedy(cold_engine, "a2", turn2, N)
    finally:
        cold_engine.close()
    assert_same_or_near_tie(logprobs_of(cold), logprobs_of(warm))


def test_a_bert_encoder_embeds_a_batch_as_each_input_alone(gguf_dir: Path) -> None:
    """BERT (bidirectional, mean pooling declared in its GGUF) through the embedder: 4 inputs embedded
    together give each the vector it gets alone."""
    cfg = EmbedderConfig(max_input_tokens=256, max_batch_tokens=256, max_batch_inputs=4, n_threads=1)
    embedder = load_embedder(str(tiny(gguf_dir, "bert")), cfg)
    try:
        assert embedder.model.info.description.startswith("bert ")
        assert embedder.model.pooling_name == "mean"
        inputs = [embedder.model.tokenize(p) for p in PROMPTS]
        alone = [embedder.embed([tokens])[0] for tokens in inputs]
        together = embedder.embed(inputs)
    finally:
        embedder.close()
    for one, batched in zip(alone, together, strict=True):
        assert one.shape == (64,)
        # as the model gives them (the APIs normalize): the bound is relative to the vector's size
        scale = float(np.linalg.norm(one))
        assert np.abs(batched - one).max() < 1e-4 * scale  # test_embeddings.py's bound on the default model
    assert not np.allclose(alone[0], alone[1]), "different inputs gave the same vector"
