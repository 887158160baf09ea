"""llama.cpp's quantizer on a built F32 model: outputs load, shrink, and q8_0 keeps greedy agreement."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.engine import LlamaModel
from llmhost.optimize.quality import PROMPTS, greedy_agreement
from llmhost.optimize.quantize import QUANT_TYPES, QuantizeError, file_type, quantize
from tests.unit.optimize.conftest import small_config


@pytest.fixture(scope="module")
def quantized(tiny_f32: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("quant")
    return {q: quantize(tiny_f32, out / f"tiny-{q}.gguf", q).path for q in ("q8_0", "q4_0")}


def agreement(model_path: Path, base_path: Path) -> float:
    model, base = LlamaModel(model_path, small_config()), LlamaModel(base_path, small_config())
    try:
        return greedy_agreement(model, base, PROMPTS, n_tokens=16).agreement
    finally:
        model.close()
        base.close()


def test_outputs_load_and_are_smaller(tiny_f32: Path, quantized: dict[str, Path]) -> None:
    f32 = tiny_f32.stat().st_size
    assert quantized["q8_0"].stat().st_size < f32 / 3
    assert quantized["q4_0"].stat().st_size < quantized["q8_0"].stat().st_size
    for q, path in quantized.items():
        assert file_type(path) == (QUANT_TYPES[q], True)
        model = LlamaModel(path, small_config())
        try:
            assert model.n_vocab == 320
        finally:
            model.close()


def test_q8_0_keeps_greedy_agreement(tiny_f32: Path, quantized: dict[str, Path]) -> None:
    assert agreement(quantized["q8_0"], tiny_f32) >= 0.9
    # the check is sensitive: 4-bit weights of a random model agree clearly less
    assert agreement(quantized["q4_0"], tiny_f32) < agreement(quantized["q8_0"], tiny_f32)


def test_progress_is_reported(tiny_f32: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int, str]] = []
    quantize(tiny_f32, tmp_path / "q.gguf", "q5_0", progress=lambda d, t, n: seen.append((d, t, n)))
    assert seen[-1][0] == seen[-1][1] == len(seen)
    assert any(name == "token_embd.weight" for _, _, name in seen)


def test_bad_inputs_give_clear_errors(tiny_f32: Path, quantized: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(QuantizeError, match="does not exist"):
        quantize(tmp_path / "missing.gguf", tmp_path / "o.gguf", "q8_0")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(QuantizeError, match="not a GGUF file"):
        quantize(junk, tmp_path / "o.gguf", "q8_0")
    with pytest.raises(QuantizeError, match=r"unknown quantization type 'q3_X'.*q4_K_M"):
        quantize(tiny_f32, tmp_path / "o.gguf", "q3_X")
    with pytest.raises(QuantizeError, match=r"already quantized \(q4_0\).*--allow-requantize"):
        quantize(quantized["q4_0"], tmp_path / "o.gguf", "q8_0")
    assert not (tmp_path / "o.gguf").exists()


def test_requantize_when_allowed(quantized: dict[str, Path], tmp_path: Path) -> None:
    result = quantize(quantized["q8_0"], tmp_path / "f16.gguf", "F16", allow_requantize=True)
    assert result.source_type == "q8_0"
    assert file_type(result.path) == (QUANT_TYPES["f16"], False)
