"""Tiny random-weight llama models, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.engine import EngineConfig
from tests.unit.optimize.tiny import make_tiny_hf


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_hf(tmp_path_factory.mktemp("tiny-hf") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_f32(tiny_hf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from llmhost.optimize.convert import convert_hf

    out = tmp_path_factory.mktemp("tiny-gguf") / "tiny-f32.gguf"
    convert_hf(tiny_hf, out, outtype="f32")
    return out


def small_config(**kw: int) -> EngineConfig:
    base = {
        "max_concurrent": 1,
        "max_input_tokens": 127,
        "max_total_tokens": 128,
        "max_batch_tokens": 64,
        "prefix_cache_seqs": 0,
        "n_threads": 1,
    }
    return EngineConfig(**(base | kw))  # type: ignore[arg-type]
