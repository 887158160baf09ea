"""A multimodal projector's share of a copy's memory, read from its file: the weights, the encoder's
compute buffer as libmtmd reserves it (its load log's figures for Gemma 3's SigLIP and Qwen2-Audio's
Whisper shapes), and the media embeddings cache; counted by the engine's memory fit and by the endpoint's
estimate of a model's memory_mb alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.memory_fit import MIB, MemoryFitError, MemoryPlan, fit_memory
from llmhost.engine.media_cache import DEFAULT_BUDGET_BYTES
from llmhost.engine.projector_memory import (
    ENCODER_BUFFER_SHARE,
    ENCODER_FIXED_BYTES,
    ProjectorMemory,
    compute_buffer_bytes,
    projector_memory,
)
from tests.tinymmproj import build_gemma3_mmproj, build_qwen2a_mmproj


def test_the_compute_buffer_is_libmtmds_for_real_encoder_shapes() -> None:
    siglip = {
        "clip.vision.embedding_length": 1152,
        "clip.vision.feed_forward_length": 4304,
        "clip.vision.image_size": 896,
        "clip.vision.patch_size": 14,
    }
    whisper = {"clip.audio.embedding_length": 1280, "clip.audio.feed_forward_length": 5120}
    # libmtmd's "CPU compute buffer size" for each, loaded on this wheel's libmtmd
    assert compute_buffer_bytes(siglip) == 121.25 * MIB
    assert round(compute_buffer_bytes(whisper) / MIB, 2) == 51.27
    assert compute_buffer_bytes({**siglip, **whisper}) == compute_buffer_bytes(siglip) + compute_buffer_bytes(
        whisper
    )
    assert compute_buffer_bytes({}) == 0
    # Qwen2-VL's (width 1280, FF 5120, 14 px patches merged 2x2): sized at libmtmd's warm-up image of
    # 46 x 46 merged patches, for which it logs 247.97 MiB; the estimate stays above it, by 17%
    qwen2vl = {
        "clip.vision.embedding_length": 1280,
        "clip.vision.feed_forward_length": 5120,
        "clip.vision.patch_size": 14,
        "clip.vision.spatial_merge_size": 2,
        "clip.vision.image_size": 560,
    }
    assert 247.97 * MIB < compute_buffer_bytes(qwen2vl) < 1.2 * 247.97 * MIB


def test_a_projector_file_counts_its_size_its_encoder_and_the_embeddings_cache(tmp_path: Path) -> None:
    for build in (build_gemma3_mmproj, build_qwen2a_mmproj):
        path = build(tmp_path / f"{build.__name__}.gguf")
        p = projector_memory(path)
        assert p.weights_bytes == path.stat().st_size
        assert p.encoder_bytes > ENCODER_FIXED_BYTES and p.embeddings_bytes == DEFAULT_BUDGET_BYTES
        assert p.total_bytes == p.weights_bytes + p.encoder_bytes + p.embeddings_bytes
    # the tiny audio tower: 1,500 positions x (FF 64 + 3 x width 32) floats
    audio = projector_memory(tmp_path / "build_qwen2a_mmproj.gguf")
    assert audio.encoder_bytes == round(1500 * 160 * 4 * ENCODER_BUFFER_SHARE) + ENCODER_FIXED_BYTES
    # a file that is no GGUF counts its size: its load is what fails, saying why
    junk = tmp_path / "junk-mmproj.gguf"
    junk.write_bytes(b"x" * 1000)
    assert projector_memory(junk) == ProjectorMemory(1000, ENCODER_FIXED_BYTES)


def test_the_memory_fit_keeps_fewer_streams_with_a_projector_and_names_its_share() -> None:
    config = EngineConfig(memory_mb=1024, prefix_cache_seqs=8)
    projector = ProjectorMemory(100 * MIB, 60 * MIB, 64 * MIB)
    without = MemoryPlan(1024, 300 * MIB, 0, 72 * MIB)
    with_it = MemoryPlan(1024, 300 * MIB, 0, 72 * MIB, projector=projector)
    assert with_it.fixed_bytes == without.fixed_bytes + 224 * MIB
    assert fit_memory(config, without).prefix_cache_seqs == 1
    with pytest.raises(MemoryFitError) as err:
        fit_memory(config, with_it)
    assert "projector 224 MiB (weights 100 + encoder 60 + media embeddings cache 64)" in str(err.value)
    assert "room for 6" in str(err.value)
