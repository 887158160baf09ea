"""`llmhost optimize` merges LoRA adapters into their base: the merged model computes what llama.cpp
computes with the adapters applied at run time, a zero adapter gives back the base file itself,
adapters for another model are refused naming the file, and merge + quantize makes an artifact whose
quality step reports perplexity.

Models are tiny random-weight Gemma 3s (tests/tinymodels.py, F16 matrices), and an F32 copy. Logits
are compared over one whole-prompt decode on both sides: with an adapter applied, llama.cpp's logits
depend on how a prompt is split into decode calls.

Tolerances. With an F32 base both sides hold F32 weights: they differ only in the order of float32
sums ((W + BA)x against Wx + B(Ax)), which attention's F16 rounding of the query (the KV cache is F16)
amplifies: 0.005 measured on logits up to ~37, asserted under 0.02. With an F16 base the merged weight
is rounded to F16 (relative 2^-11 a weight), which moves the logits by as much as storing the same
weights as F32 instead of F16 does: 0.034 measured for that, 0.035 for the merge, asserted under 0.1.
The adapters themselves move the logits by more than 1 (asserted), so a merge with a wrong scale,
alpha, transposition or weight fails by an order of magnitude."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt
import pytest
import yaml

from llmhost.engine.llamacpp.gguf_check import check_file
from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.optimize.artifact import ArtifactError, Recipe, build_or_reuse
from llmhost.optimize.lora_merge import MergeError, merge_lora, tensor_bytes
from llmhost.optimize.merge_step import merge_inputs
from llmhost.optimize.quality import eval_config
from llmhost.optimize.quantize import quantize
from tests.integration.lora_helpers import write_adapter
from tests.tinymodels import build_tiny_gguf

PROMPT = "The lighthouse keeper climbed the stairs at dusk and lit the lamp"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("merge")
    f16 = build_tiny_gguf(tmp / "tiny-f16.gguf", arch="gemma3")
    made = {"f16": f16, "f32": quantize(f16, tmp / "tiny-f32.gguf", "f32").path}
    made["a"] = write_adapter(tmp / "a.gguf", f16, seed=1, std=0.1, alpha=8.0)  # s = scale * 8 / 4
    made["b"] = write_adapter(tmp / "b.gguf", f16, seed=2, std=0.1, rank=8, alpha=0)  # s = scale
    made["zero"] = write_adapter(tmp / "zero.gguf", f16, seed=0, zero=True)
    return made


def logits(model: Path, adapters: Sequence[tuple[Path, float]] = ()) -> npt.NDArray[np.float32]:
    """Every position's logits of PROMPT in one decode, `adapters` applied by llama.cpp."""
    llm = LlamaModel(model, eval_config(window=64, threads=1, batch=64))
    loaded = [llm.load_adapter(str(path)) for path, _ in adapters]
    try:
        llm.use_adapters([(a, s) for a, (_, s) in zip(loaded, adapters, strict=True)])
        tokens = llm.tokenize(PROMPT)
        assert len(tokens) <= llm.n_batch
        rows = np.concatenate(list(llm.iter_logits(tokens)))
    finally:
        llm.use_adapters([])
        for adapter in loaded:
            llm.free_adapter(adapter)
        llm.close()
    return rows


def optimize(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmhost.cli", "optimize", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("base", "tolerance"), [("f32", 0.02), ("f16", 0.1)])
def test_merged_model_computes_the_adapters_applied_at_run_time(
    models: dict[str, Path], tmp_path: Path, base: str, tolerance: float
) -> None:
    chosen = [(models["a"], 0.5), (models["b"], 1.5)]
    result = merge_lora(models[base], chosen, tmp_path / "merged.gguf")
    assert result.merged == ("blk.0.attn_q.weight", "blk.1.attn_q.weight")
    at_run_time = logits(models[base], chosen)
    assert np.abs(at_run_time - logits(models[base])).max() > 1.0
    assert np.abs(logits(result.path) - at_run_time).max() < tolerance


def test_merge_command_scales_an_adapter_as_serve_does(models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "merged.gguf"
    proc = optimize("merge-lora", str(models["f32"]), "--lora", f"{models['a']}:0.25", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "a*0.25 merged into 2 weights (f16)" in proc.stdout
    expected = logits(models["f32"], [(models["a"], 0.25)])
    assert np.abs(logits(out) - expected).max() < 0.02  # F32 base: merged weights stay F32


def test_a_token_embedding_adapter_merges_as_llama_cpp_applies_it(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """The embedding's pair is stored the other way round (A [rank, n_vocab], B [rank, n_embd])."""
    n_embd, n_vocab = check_file(models["f32"]).tensors["token_embd.weight"][0]
    rng = np.random.default_rng(5)
    pair = {"token_embd.weight.lora_a": (n_vocab, 4), "token_embd.weight.lora_b": (n_embd, 4)}
    adapter = _adapter(
        tmp_path / "embd.gguf", {n: rng.normal(0, 0.3, s).astype(np.float32) for n, s in pair.items()}
    )
    merged = merge_lora(models["f32"], [(adapter, 0.7)], tmp_path / "merged.gguf").path
    at_run_time = logits(models["f32"], [(adapter, 0.7)])
    assert np.abs(at_run_time - logits(models["f32"])).max() > 1.0
    assert np.abs(logits(merged) - at_run_time).max() < 0.02  # a row lookup plus a row: no rounding here


def test_zero_adapter_gives_back_the_base_file(models: dict[str, Path], tmp_path: Path) -> None:
    """Metadata and untouched weights are copied byte for byte, an F16 weight plus zero is itself."""
    merged = merge_lora(models["f16"], [(models["zero"], 1.0)], tmp_path / "merged.gguf").path
    assert merged.read_bytes() == models["f16"].read_bytes()


def tensors(path: Path) -> dict[str, tuple[gguf.GGMLQuantizationType, npt.NDArray[np.uint8]]]:
    """Each tensor's type and bytes (read by offset: gguf.GGUFReader takes seconds over a vocabulary)."""
    layout, raw = check_file(path), np.fromfile(path, np.uint8)
    return {
        name: (gguf.GGMLQuantizationType(kind), raw[layout.offsets[name] :][: tensor_bytes(dims, kind)])
        for name, (dims, kind) in layout.tensors.items()
    }


def test_quantized_weights_are_dequantized_before_the_update(models: dict[str, Path], tmp_path: Path) -> None:
    q8 = quantize(models["f16"], tmp_path / "q8.gguf", "q8_0").path
    merged = merge_lora(q8, [(models["a"], 0.5)], tmp_path / "merged.gguf", merged_type="f32").path
    base, adapter, out = tensors(q8), tensors(models["a"]), tensors(merged)
    for name, (kind, data) in base.items():
        if not name.endswith("attn_q.weight"):
            assert out[name][0] == kind and out[name][1].tobytes() == data.tobytes()
    w = gguf.quants.dequantize(base["blk.0.attn_q.weight"][1].reshape(64, -1), gguf.GGMLQuantizationType.Q8_0)
    a, b = (adapter[f"blk.0.attn_q.weight.lora_{x}"][1].view(np.float32) for x in "ab")
    kind, data = out["blk.0.attn_q.weight"]
    assert kind == gguf.GGMLQuantizationType.F32
    expected = w + 0.5 * 8 / 4 * (b.reshape(64, 4) @ a.reshape(4, 64))
    np.testing.assert_allclose(data.view(np.float32).reshape(64, 64), expected, atol=1e-6)


@pytest.fixture(scope="module")
def wrong(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("wrong")
    base = models["f16"]
    made = {
        "llama": write_adapter(tmp / "llama.gguf", base, seed=3, arch="llama"),
        "shape": write_adapter(tmp / "shape.gguf", base, seed=3, shape_off_by=3),
        "model": base,
        "missing": _adapter(
            tmp / "missing.gguf",
            {
                "blk.7.attn_q.weight.lora_a": np.zeros((4, 64), np.float32),
                "blk.7.attn_q.weight.lora_b": np.zeros((64, 4), np.float32),
            },
        ),
        "lone": _adapter(tmp / "lone.gguf", {"blk.0.attn_q.weight.lora_a": np.zeros((4, 64), np.float32)}),
    }
    yield made


def _adapter(path: Path, tensors: dict[str, npt.NDArray[np.float32]]) -> Path:
    """An adapter of these tensors (numpy shapes), with no alpha."""
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    for name, values in tensors.items():
        writer.add_tensor(name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


REFUSALS = {
    "llama": "is for 'llama', the base",
    "shape": "do not fit the base's [64, 64]",
    "model": "is not a LoRA adapter (general.type None",
    "missing": "adapts 'blk.7.attn_q.weight', which the base",
    "lone": "'blk.0.attn_q.weight.lora_a' has no lora_b beside it",
}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_adapters_for_another_model_are_refused_naming_them(
    models: dict[str, Path], wrong: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    out = tmp_path / "merged.gguf"
    with pytest.raises(MergeError) as err:
        merge_lora(models["f16"], [(models["a"], 1.0), (wrong[kind], 1.0)], out)
    assert str(wrong[kind]) in str(err.value) and REFUSALS[kind] in str(err.value)
    assert list(tmp_path.iterdir()) == []  # checked before anything is written


def test_the_command_refuses_with_the_reason(
    models: dict[str, Path], wrong: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "merged.gguf"
    proc = optimize("merge-lora", str(models["f16"]), "--lora", str(wrong["shape"]), "--out", str(out))
    assert proc.returncode == 2 and f"adapter {wrong['shape']}: 'blk.0.attn_q.weight'" in proc.stderr
    proc = optimize("merge-lora", str(models["f16"]), "--lora", str(tmp_path / "none.gguf"), "-o", str(out))
    assert proc.returncode == 2 and f"--merge-lora {tmp_path / 'none.gguf'}" in proc.stderr
    assert not out.exists()


def test_merge_then_quantize_builds_an_artifact_with_its_quality(
    models: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "artifact"
    args = ["artifact", str(models["f16"]), "--out", str(out), "--merge-lora", f"{models['a']}:0.5"]
    proc = optimize(*args, "--quantize", "q8_0", "--threads", "1", "--eval-max-tokens", "64")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["reused"] is False
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    merged, quantized = recipe["steps"]
    [adapter] = merged["merge_lora"]
    assert adapter["name"] == "a" and adapter["scale"] == 0.5 and len(adapter["sha256"]) == 64
    assert merged["merged_tensors"] == 2 and merged["type"] == "f16"
    assert quantized["quantize"] == "q8_0"
    quality = json.loads((out / "quality.json").read_text())
    assert 1 < quality["perplexity"]["perplexity"] < float("inf")
    # the base: the merged model before quantizing
    assert quality["base_perplexity"]["tokens_scored"] == quality["perplexity"]["tokens_scored"]
    assert sorted(p.name for p in out.iterdir()) == [
        "artifact.json",
        "model.gguf",
        "quality.json",
        "recipe.yaml",
    ]
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(out / "model.gguf")).tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert logits(out / "model.gguf").shape[0] > 1  # llama.cpp loads it
    again = optimize(*args, "--quantize", "q8_0", "--threads", "1", "--eval-max-tokens", "64")
    assert json.loads(again.stdout.splitlines()[-1])["reused"] is True  # same adapter, same key


def test_a_quantized_base_is_refused_before_merging_unless_requantizing(
    models: dict[str, Path], tmp_path: Path
) -> None:
    q8 = quantize(models["f16"], tmp_path / "q8.gguf", "q8_0").path
    recipe = Recipe(quantize="q8_0", merge_lora=merge_inputs([str(models["a"])]))
    with pytest.raises(ArtifactError, match=r"q8\.gguf is quantized \(q8_0\).*--allow-requantize"):
        build_or_reuse(q8, tmp_path / "artifact", recipe)
    assert not (tmp_path / "artifact" / "merged.gguf").exists()
