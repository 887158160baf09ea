"""SWA checkpoints on the tiny Gemma 3 (a 128-position window on every second layer), sliding-window
layers at their window (the default): a prompt sharing a shorter prefix of a cached sequence than its
whole KV restores the newest checkpoint at or before it and answers as a cold prefill does; a sequence
keeps at most its bound and frees them with its KV; the host-memory tier saves and restores a windowed
conversation, and with it the checkpoints that serve its shorter prefixes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from llmhost.engine import Engine, EngineConfig, LlamaModel
from llmhost.engine.kv.memory_fit import gguf_kv_shape
from llmhost.engine.llamacpp.gguf_check import check_file
from tests.integration.engine_runs import logprobs_of, run_greedy
from tests.integration.neartie import assert_same_or_near_tie
from tests.tinymodels import SWA_WINDOW, build_tiny_gguf

_RANDOM = random.Random(0)
TEXT = [_RANDOM.randrange(100, 40000) for _ in range(3000)]
LONG = TEXT[:700]  # far past the window and a micro-batch: its first cells are gone once prefilled
FOLLOW = LONG[:300] + TEXT[2000:2040]  # shares 300 tokens of it


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gguf(tmp_path_factory.mktemp("swa") / "gemma3.gguf", arch="gemma3")


def engine(path: Path, prefix_cache_seqs: int = 2, **kw: object) -> Engine:
    cfg = EngineConfig(
        **{  # type: ignore[arg-type]
            "max_concurrent": 2,
            "max_total_tokens": 1024,
            "max_input_tokens": 1000,
            "max_batch_tokens": 64,
            "n_threads": 1,
            "prefix_cache_seqs": prefix_cache_seqs,
            "prompt_cache_mb": 0,
            **kw,
        }
    )
    return Engine(LlamaModel(path, cfg), cfg)


def cold(path: Path, prompt: list[int]) -> dict[str, object]:
    eng = engine(path, prefix_cache_seqs=0)
    try:
        return logprobs_of(run_greedy(eng, "cold", prompt, 12))
    finally:
        eng.close()


def test_a_shorter_shared_prefix_is_restored_from_a_checkpoint_and_answers_as_a_cold_prefill(
    gemma3: Path,
) -> None:
    eng = engine(gemma3)
    assert eng.model.swa_window == SWA_WINDOW and not eng.config.swa_full
    assert gguf_kv_shape(check_file(gemma3).metadata) == eng.model.kv_shape, "the estimate's reading"
    run_greedy(eng, "long", LONG, 1)
    # checkpoints at chunk starts 64 apart, the first three kept (a shared system prompt is early), each
    # at most the window's cells (the 128 positions before the checkpoint: all a token after it sees)
    assert eng.stats().swa_checkpoints_made == 3
    cps = eng.model.checkpoints
    [seq] = [s for s in range(eng.config.n_seq_max) if cps.count(s)]
    sizes = [len(cp.data) for n in (64, 128, 192) if (cp := cps.at(seq, n)) is not None]
    assert len(sizes) == 3 and sizes[0] < sizes[1] == sizes[2], sizes
    warm = run_greedy(eng, "follow", FOLLOW, 12)
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n == 192, "the newest checkpoint at or before 299"
    stats = eng.stats()
    assert stats.swa_checkpoints_restored == 1 and stats.swa_checkpoint_bytes > 0
    own = run_greedy(eng, "own", LONG + TEXT[2500:2520], 1)[-1].timings
    assert own is not None and own.cache_n == len(LONG), "its own next turn takes all of it"
    eng.close()
    assert_same_or_near_tie(cold(gemma3, FOLLOW), logprobs_of(warm))


def test_without_checkpoints_a_shorter_prefix_is_prefilled_from_scratch(gemma3: Path) -> None:
    eng = engine(gemma3, swa_checkpoints=0)
    run_greedy(eng, "long", LONG, 1)
    warm = run_greedy(eng, "follow", FOLLOW, 12)
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n == 0
    assert eng.stats().swa_checkpoint_bytes == 0
    eng.close()
    assert_same_or_near_tie(cold(gemma3, FOLLOW), logprobs_of(warm))


def test_checkpoints_are_bounded_and_freed_with_their_sequence(gemma3: Path) -> None:
    eng = engine(gemma3, max_concurrent=1, prefix_cache_seqs=0, swa_checkpoints=2)
    run_greedy(eng, "long", LONG, 1)
    model = eng.model
    assert model.checkpoints.count(0) == 2, "kept with the conversation's KV in its slot"
    assert eng.stats().swa_checkpoint_bytes > 0
    # an unrelated prompt too short for checkpoints takes the only slot: the long conversation's KV and
    # checkpoints go
    run_greedy(eng, "other", TEXT[1000:1100], 1)
    assert sum(model.checkpoints.count(s) for s in range(eng.config.n_seq_max)) == 0
    assert eng.stats().swa_checkpoint_bytes == 0
    eng.close()


def test_the_host_tier_saves_and_restores_a_windowed_conversation(gemma3: Path) -> None:
    eng = engine(gemma3, max_concurrent=1, prefix_cache_seqs=0, prompt_cache_mb=64)
    run_greedy(eng, "long", LONG, 1)
    run_greedy(eng, "other", TEXT[1000:1300], 1)  # evicts the long conversation to host memory
    assert eng.stats().prompt_cache_stores == 1
    turn2 = LONG + TEXT[2500:2520]
    warm = run_greedy(eng, "own", turn2, 12)
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n == len(LONG)
    assert eng.stats().prompt_cache_hits == 1
    eng.close()
    assert_same_or_near_tie(cold(gemma3, turn2), logprobs_of(warm))


def test_a_host_tier_state_serves_a_shorter_prefix_from_the_checkpoints_saved_with_it(gemma3: Path) -> None:
    eng = engine(gemma3, max_concurrent=1, prefix_cache_seqs=0, prompt_cache_mb=64)
    run_greedy(eng, "long", LONG, 1)
    run_greedy(eng, "other", TEXT[1000:1300], 1)  # evicts the long conversation and its checkpoints
    assert eng.stats().prompt_cache_stores == 1
    # FOLLOW shares 300 tokens of it, far under what its window's cells still hold: the state is
    # restored, cut to 192, and its sliding-window cells taken from the checkpoint made at 192
    warm = run_greedy(eng, "follow", FOLLOW, 12)
    timings = warm[-1].timings
    assert timings is not None and timings.cache_n == 192
    stats = eng.stats()
    assert stats.prompt_cache_hits == 1 and stats.swa_checkpoints_restored == 1
    eng.close()
    assert_same_or_near_tie(cold(gemma3, FOLLOW), logprobs_of(warm))


def test_all_checkpoints_stay_within_the_running_sequences_budget(gemma3: Path) -> None:
    # one running sequence: a budget of its 3 checkpoints at their largest; an idle cached conversation
    # keeps its own until a newer prompt's need the room, the first made going first
    eng = engine(gemma3, max_concurrent=1, prefix_cache_seqs=1)
    cps = eng.model.checkpoints
    budget = cps.policy.budget
    assert budget is not None and budget > 0
    run_greedy(eng, "long", LONG, 1)
    assert eng.stats().swa_checkpoints_made == 3 and cps.dropped == 0
    run_greedy(eng, "other", TEXT[1000:1700], 1)  # a second long prompt: 3 more
    stats = eng.stats()
    assert stats.swa_checkpoints_made == 6 and cps.dropped >= 1
    assert 0 < stats.swa_checkpoint_bytes <= budget
    eng.close()
