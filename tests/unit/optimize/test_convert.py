"""HF safetensors llama -> GGUF: the result loads in llama.cpp, tokenizes, and computes the same logits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmhost.engine import LlamaModel
from llmhost.optimize.convert import ConvertError, convert_hf
from llmhost.optimize.quality import greedy
from tests.unit.optimize.conftest import small_config
from tests.unit.optimize.tiny import reference_logits

TEXT = "the quick brown fox jumps over the lazy dog"


def test_f32_conversion_matches_a_numpy_forward_pass(tiny_hf: Path, tiny_f32: Path) -> None:
    model = LlamaModel(tiny_f32, small_config())
    try:
        tokens = model.tokenize(TEXT)
        assert model.detokenize(tokens) == TEXT
        got = np.concatenate(list(model.iter_logits(tokens)))
    finally:
        model.close()
    ref = reference_logits(tiny_hf, tokens)
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_f16_conversion_loads_and_decodes(tiny_hf: Path, tmp_path: Path) -> None:
    seen: list[str] = []
    result = convert_hf(tiny_hf, tmp_path / "tiny-f16.gguf", progress=lambda d, t, n: seen.append(n))
    assert result.tokenizer == "gpt2"
    assert "token_embd.weight" in seen and len(seen) == result.n_tensors
    model = LlamaModel(result.path, small_config())
    try:
        assert model.n_vocab == 320
        prompt = model.tokenize(TEXT)
        assert prompt[0] == json.loads((tiny_hf / "config.json").read_text())["bos_token_id"]
        out = greedy(model, prompt, 8)
        assert len(out) >= 1 and all(0 <= t < model.n_vocab for t in out)
        logits = np.concatenate(list(model.iter_logits(prompt)))
    finally:
        model.close()
    ref = reference_logits(tiny_hf, prompt)
    assert np.isfinite(logits).all()
    assert (logits.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


def test_bad_directories_are_refused(tiny_hf: Path, tmp_path: Path) -> None:
    with pytest.raises(ConvertError, match=r"no config\.json"):
        convert_hf(tmp_path, tmp_path / "x.gguf")
    other = tmp_path / "gpt"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ConvertError, match="unsupported architecture"):
        convert_hf(other, tmp_path / "x.gguf")
    with pytest.raises(ConvertError, match="unknown output type"):
        convert_hf(tiny_hf, tmp_path / "x.gguf", outtype="q4_0")
