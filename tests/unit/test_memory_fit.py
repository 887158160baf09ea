"""An engine sized to its memory_mb: idle cached sequences as many as fit, running ones refused naming
each part when they alone do not fit, nothing changed without a bound."""

from __future__ import annotations

import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.memory_fit import (
    MIB,
    RUNTIME_MARGIN_MB,
    KvShape,
    MemoryFitError,
    MemoryPlan,
    checkpoint_budget,
    fit_memory,
    gguf_kv_shape,
    guess_logits_bytes,
    new_checkpoints,
    prompt_logits_bytes,
    running_kv_bytes,
    stream_bytes,
    swa_cells,
)


def memory_plan(
    memory_mb: int, process_mb: int = 300, weights_left_mb: int = 0, stream_mb: int = 72
) -> MemoryPlan:
    return MemoryPlan(memory_mb, process_mb * MIB, weights_left_mb * MIB, stream_mb * MIB)


def test_without_a_bound_nothing_changes() -> None:
    config = EngineConfig()
    assert fit_memory(config, memory_plan(0)) is config


def test_extra_cached_streams_shrink_to_fit() -> None:
    config = EngineConfig(memory_mb=1024, prefix_cache_seqs=8)  # 8 running + 8 extra x 72 MiB beside 300 MiB
    fitted = fit_memory(config, memory_plan(1024))
    assert fitted.prefix_cache_seqs == (1024 - 300 - RUNTIME_MARGIN_MB) // 72 - 8 == 1
    assert fitted.max_concurrent == 8 and fitted.max_total_tokens == config.max_total_tokens
    roomy = EngineConfig(memory_mb=4096, prefix_cache_seqs=8)
    assert fit_memory(roomy, memory_plan(4096)).prefix_cache_seqs == 8


def test_running_sequences_that_do_not_fit_are_refused_naming_each_part() -> None:
    with pytest.raises(MemoryFitError) as err:
        fit_memory(EngineConfig(memory_mb=700), memory_plan(700, process_mb=345, weights_left_mb=50))
    message = str(err.value)
    for part in (
        "--memory-mb 700",
        "8 running sequences of 4096 tokens",
        "process 345 MiB",
        "weights not yet resident 50 MiB",
        "runtime 64 MiB",
        "KV cache 8 x 72.0 MiB",
        "= 1035 MiB",
        "room for 3",
        "--max-concurrent",
        "--max-total-tokens",
    ):
        assert part in message, message


# Gemma 3 270M: 18 layers (15 with a 512-position window), K and V of 256 values, f16: 18 KiB a position
GEMMA3 = KvShape(bytes_per_token=18 * 1024, layers=18, swa_layers=15, swa_window=512)


def test_a_stream_counts_sliding_window_layers_at_their_window() -> None:
    full = stream_bytes(EngineConfig(swa_full=True), GEMMA3)
    assert full == 4096 * 18 * 1024  # 72 MiB
    # 3 full layers of 4,096 positions + 15 of the window and a 512-token micro-batch (llama.cpp's cells)
    assert swa_cells(EngineConfig(), 512) == 1024
    assert stream_bytes(EngineConfig(), GEMMA3) == (3 * 4096 + 15 * 1024) * 1024  # 27 MiB
    assert stream_bytes(EngineConfig(), KvShape(1024, 18)) == 4096 * 1024, "no sliding window: every position"


def test_checkpoints_are_counted_once_for_the_running_sequences_not_per_stream() -> None:
    # each running sequence's at their largest: before the longest prompt's last micro-batch (2,048 -
    # 512 - 1 = 1,535: the window's 512 cells), then 512 positions earlier (1,023: 512; 511: 511 cells)
    # (each cell's K and V in 15 layers and its position and sequence; each state's header)
    assert checkpoint_budget(EngineConfig(), GEMMA3) == 8 * ((512 + 512 + 511) * (15 * 1024 + 12) + 3 * 2048)
    one = checkpoint_budget(EngineConfig(swa_checkpoints=1, max_concurrent=2), GEMMA3)
    assert one == 2 * (512 * (15 * 1024 + 12) + 2048)
    assert checkpoint_budget(EngineConfig(swa_checkpoints=0), GEMMA3) == 0
    assert checkpoint_budget(EngineConfig(swa_full=True), GEMMA3) == 0, "every position held: none made"
    budget = checkpoint_budget(EngineConfig(), GEMMA3)
    assert new_checkpoints(EngineConfig(), GEMMA3, windowed=True).policy.budget == budget
    assert new_checkpoints(EngineConfig(), GEMMA3, windowed=False).policy.budget == 0, "an embeddings context"
    # memory_mb counts the budget once beside the running and idle streams' windowed KV
    p = MemoryPlan(1024, 300 * MIB, 0, 27 * MIB, budget)
    assert p.need_mb(16) == pytest.approx(300 + RUNTIME_MARGIN_MB + budget / MIB + 16 * 27)
    assert p.streams_that_fit() == int((1024 - 300 - RUNTIME_MARGIN_MB - budget / MIB) // 27) == 17


def test_speculation_keeps_sliding_window_layers_whole() -> None:
    assert EngineConfig(speculative="ngram").swa_full
    assert stream_bytes(EngineConfig(speculative="ngram"), GEMMA3) == 4096 * 18 * 1024


def gemma3_metadata(**extra: object) -> dict[str, object]:
    return {
        "general.architecture": "gemma3",
        "gemma3.block_count": 18,
        "gemma3.embedding_length": 640,
        "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 256,
        "gemma3.attention.sliding_window": 512,
        **extra,
    }


def test_a_ggufs_shape_counts_the_sliding_window_layers_llama_cpp_gives_its_architecture() -> None:
    assert gguf_kv_shape(gemma3_metadata()) == GEMMA3, "5 of every 6 layers windowed (llama.cpp's gemma3)"
    q8 = gguf_kv_shape(gemma3_metadata(), "q8_0", "q8_0")
    assert (q8.bytes_per_token, q8.swa_layers) == (18 * 2 * 272, 15)
    assert gguf_kv_shape(gemma3_metadata(**{"gemma3.attention.sliding_window_pattern": 2})).swa_layers == 9
    no_window = {k: v for k, v in gemma3_metadata().items() if "sliding" not in k}
    assert gguf_kv_shape(no_window) == KvShape(18 * 1024, 18), "no window: every position"
    as_list = gemma3_metadata(**{"gemma3.attention.sliding_window_pattern": [True, False]})
    assert gguf_kv_shape(as_list) == KvShape(18 * 1024, 18), "a per-layer list it cannot read: counted whole"
    llama = {**no_window, "general.architecture": "llama", "llama.attention.sliding_window": 4096}
    assert gguf_kv_shape(llama).swa_layers == 0, "an architecture llama.cpp gives no window"
    # the estimate of a copy: running streams at their window with the checkpoints' budget
    budget = checkpoint_budget(EngineConfig(), GEMMA3)
    assert running_kv_bytes(EngineConfig(), GEMMA3) == 8 * 27 * MIB + budget
    assert running_kv_bytes(EngineConfig(swa_full=True), GEMMA3) == 8 * 72 * MIB


def test_a_steps_prompt_logits_are_counted_twice_beside_the_runtime_margin() -> None:
    # llama.cpp's compute buffer and the logits it hands back: 16 rows of Gemma 3's 262,144 tokens each
    assert prompt_logits_bytes(EngineConfig(), 262_144) == 2 * 16 * MIB
    counted = MemoryPlan(
        1024, 300 * MIB, 0, 72 * MIB, logits_bytes=prompt_logits_bytes(EngineConfig(), 262_144)
    )
    assert counted.fixed_mb == memory_plan(1024).fixed_mb + 32
    assert "prompt logits 32 MiB" in counted.parts()
    assert "guesses" not in counted.parts()


def test_speculative_guesses_logits_are_counted_twice_beside_the_prompts() -> None:
    # 8 running sequences verifying up to 12 guesses each: 96 rows of Gemma 3's 262,144 tokens, twice
    speculating = EngineConfig(speculative="ngram", draft_tokens=12)
    assert guess_logits_bytes(speculating, 262_144) == 2 * 96 * MIB
    assert guess_logits_bytes(EngineConfig(), 262_144) == 0
    counted = MemoryPlan(
        1024, 300 * MIB, 0, 72 * MIB, guess_logits_bytes=guess_logits_bytes(speculating, 262_144)
    )
    assert counted.fixed_mb == memory_plan(1024).fixed_mb + 192
    assert "speculative guesses' logits 192 MiB" in counted.parts()
