"""benchmarks/shapes.py's pure parts: the shape table against the published parameter counts, the cache
key, the servers' command lines, the summary of the rounds; and tinymodels' shaped builder on a scaled-down
shape (loaded and run in llama-cpp-python)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.tinymodels import Dims, build_shaped_gguf, llama3_rope_factors, padded_tokenizer, smollm2_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import shapes

# each model card's parameter count (safetensors, tied embeddings counted once); the GGUF adds Llama 3's
# rope_freqs (head_dim / 2 floats)
PUBLISHED = {
    "qwen2.5-0.5b": 494_032_768,
    "llama3.2-1b": 1_235_814_400 + 32,
    "llama3.2-3b": 3_212_749_824 + 64,
    "llama3.1-8b": 8_030_261_248 + 64,
}


@pytest.mark.parametrize("key", list(shapes.SHAPES))
def test_each_shape_has_its_models_published_parameter_count(key: str) -> None:
    h = shapes.hparams(shapes.SHAPES[key])
    assert h["parameters"] == PUBLISHED[key]
    assert h["head_dim"] in (64, 128)


def test_the_table_is_the_config_json_figures() -> None:
    qwen = shapes.hparams(shapes.SHAPES["qwen2.5-0.5b"])
    assert (qwen["arch"], qwen["n_layer"], qwen["n_embd"], qwen["n_head"], qwen["n_head_kv"]) == (
        "qwen2",
        24,
        896,
        14,
        2,
    )
    assert (qwen["n_ff"], qwen["n_vocab"], qwen["tied"], qwen["llama3_rope"]) == (4864, 151936, True, None)
    eight = shapes.SHAPES["llama3.1-8b"]
    assert not eight.dims.tied and eight.one_user_only and eight.dims.llama3_rope == (8.0, 1.0, 4.0, 8192)
    assert shapes.SHAPES["llama3.2-1b"].dims.rope_theta == 500000.0
    assert "llama3.1-8b" not in shapes.DEFAULT_SHAPES


def test_the_cache_key_follows_the_shape() -> None:
    names = {shapes.cache_name(k, s) for k, s in shapes.SHAPES.items()}
    assert len(names) == len(shapes.SHAPES)
    name = shapes.cache_name("qwen2.5-0.5b", shapes.SHAPES["qwen2.5-0.5b"])
    assert name == shapes.cache_name("qwen2.5-0.5b", shapes.SHAPES["qwen2.5-0.5b"])
    assert name.startswith("qwen2.5-0.5b-") and name.endswith(".Q4_K_M.gguf")


def test_llama3_rope_factors_run_from_1_to_the_scaling_factor() -> None:
    f = llama3_rope_factors(shapes.SHAPES["llama3.2-1b"].dims)
    assert f.shape == (32,) and f.dtype == np.float32
    assert f[0] == 1.0 and f[-1] == 32.0 and bool(np.all(np.diff(f) >= 0))


def _settings() -> shapes.Settings:
    return shapes.Settings(
        threads=2,
        max_concurrent=8,
        ctx_per_seq=2048,
        prompt_tokens=64,
        new_tokens=64,
        rounds=1,
        llama_server="/bin/llama-server",
    )


def test_both_servers_get_the_same_slots_context_threads_and_kv_type() -> None:
    cmds = shapes.commands(Path("m.gguf"), _settings(), "q8_0", probe=False)
    lh, ls = cmds["llmhost"], cmds["llama-server"]
    assert lh[lh.index("--max-concurrent") + 1] == ls[ls.index("-np") + 1] == "8"
    assert int(ls[ls.index("-c") + 1]) == 8 * int(lh[lh.index("--max-total-tokens") + 1])
    assert lh[lh.index("--threads") + 1] == ls[ls.index("-t") + 1] == "2"
    for cmd in (lh, ls):
        assert cmd[cmd.index("--cache-type-k") + 1] == cmd[cmd.index("--cache-type-v") + 1] == "q8_0"
    assert lh[lh.index("--log-level") + 1] == "warning" and "-lv" not in ls
    probe = shapes.commands(Path("m.gguf"), _settings(), "f16", probe=True)
    assert probe["llmhost"][probe["llmhost"].index("--log-level") + 1] == "debug"
    assert probe["llama-server"][-2:] == ["-lv", "4"]


def test_the_8b_shape_is_measured_by_one_user_only() -> None:
    s = _settings()
    assert s.levels(shapes.SHAPES["llama3.1-8b"]) == [1]
    assert s.levels(shapes.SHAPES["llama3.2-3b"]) == [1, 8]
    assert (shapes.level_requests(1), shapes.level_requests(8)) == (4, 16)


def _run(tps1: float, tps8: float, ttft8: float | None, rss: float) -> dict[str, Any]:
    return {
        "c1": {"output_tokens_per_s": tps1, "ttft_ms_p50": 100.0, "itl_ms_p50": 20.0, "errors": {}},
        "c8": {"output_tokens_per_s": tps8, "ttft_ms_p50": ttft8, "itl_ms_p50": 40.0, "errors": {"x": 1}},
        "rss_mb": rss,
    }


def test_the_summary_gives_medians_per_server_and_the_median_of_per_round_ratios() -> None:
    rounds = [
        {"llmhost": _run(10.0, 40.0, 500.0, 600.0), "llama-server": _run(10.0, 50.0, 1000.0, 500.0)},
        {"llmhost": _run(12.0, 44.0, None, 620.0), "llama-server": _run(8.0, 40.0, 800.0, 500.0)},
        {"llmhost": _run(9.0, 30.0, 600.0, 610.0), "llama-server": _run(10.0, 40.0, 600.0, 520.0)},
    ]
    floor = {"llmhost": {"floor_mb": 550.0}, "llama-server": {"floor_mb": 450.0}}
    out = shapes.summarise(rounds, floor)
    ours = out["medians"]["llmhost"]
    assert ours["c1_output_tokens_per_s"] == 10.0 and ours["c8_output_tokens_per_s"] == 40.0
    assert ours["c8_ttft_ms_p50"] == 550.0  # a level without the figure is left out, not counted as 0
    assert list(ours)[:3] == ["c1_output_tokens_per_s", "c1_ttft_ms_p50", "c1_itl_ms_p50"]
    ratio = out["llmhost/llama-server"]["c8_output_tokens_per_s"]
    assert ratio == {"median": 0.8, "min": 0.75, "max": 1.1}
    assert out["llmhost/llama-server"]["c8_ttft_ms_p50"] == {"median": 0.75, "min": 0.5, "max": 1.0}
    assert out["rss_over_floor_mb"] == {"llmhost": 60.0, "llama-server": 50.0}
    assert out["failed_requests"] == {"llmhost": 3, "llama-server": 3}


def test_the_summary_of_one_server_has_no_ratios() -> None:
    out = shapes.summarise([{"llmhost": _run(10.0, 40.0, 500.0, 600.0)}])
    assert out["llmhost/llama-server"] == {} and "rss_over_floor_mb" not in out


def test_the_padded_vocabulary_is_smollm2s_then_distinct_normal_fillers() -> None:
    base = smollm2_tokenizer()
    tok = padded_tokenizer(len(base.tokens) + 1000)
    assert len(tok.tokens) == len(tok.token_types) == len(base.tokens) + 1000
    assert tok.tokens[: len(base.tokens)] == base.tokens
    assert len(set(tok.tokens)) == len(tok.tokens)
    assert set(tok.token_types[len(base.tokens) :]) == {1}  # gguf.TokenType.NORMAL
    with pytest.raises(ValueError, match="at least"):
        padded_tokenizer(100)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_a_scaled_down_shape_loads_and_generates_its_fillers_as_text(tmp_path: Path, arch: str) -> None:
    import llama_cpp

    rope = (32.0, 1.0, 4.0, 8192) if arch == "llama" else None
    n_vocab = len(smollm2_tokenizer().tokens) + 500
    dims = Dims(2, 128, 4, 2, 256, n_vocab, tied=arch == "qwen2", llama3_rope=rope)
    path = build_shaped_gguf(tmp_path / "m.gguf", arch, dims)
    if arch == "qwen2":
        assert build_shaped_gguf(tmp_path / "again.gguf", arch, dims).read_bytes() == path.read_bytes()
    # logits_all: without it llama-cpp-python 0.3.36 leaves its scores array unwritten (uninitialized memory)
    llm = llama_cpp.Llama(str(path), n_ctx=128, n_threads=1, logits_all=True, verbose=False)
    try:
        assert llm.n_vocab() == n_vocab
        llm.eval(llm.tokenize(b"Hello world"))
        assert np.isfinite(np.asarray(llm.eval_logits[-1])).all()
        text = llm.detokenize([n_vocab - 1])
        assert text.startswith(b" z") and int(text[2:], 16) >= 499
    finally:
        llm.close()


def test_the_docs_kv_table_is_made_of_the_measured_buffer_file_and_rss() -> None:
    """1B at 8 slots x 2,048: llama.cpp's 512 MiB KV buffer is 32 KiB a token; RSS as measured per KV type."""

    def kv(rss: tuple[float, float]) -> dict[str, Any]:
        servers = {"llmhost": {"rss_mb": rss[0]}, "llama-server": {"rss_mb": rss[1]}}
        return {"floor": {"llama-server": {"buffers_mib": {"kv": 512.0}}}, "medians": servers}

    entry = {
        "shape": shapes.hparams(shapes.SHAPES["llama3.2-1b"]),
        "gguf": {"size_mb": 803.2},
        "kv": {"q8_0": kv((1500.0, 1450.0)), "f16": kv((1800.4, 1750.6))},
    }
    doc = {"settings": {"max_concurrent": 8, "ctx_per_seq": 2048}, "shapes": {"llama3.2-1b": entry}}
    head, rule, row = shapes.kv_table(doc).splitlines()
    assert "RSS, f16 KV (llmhost / llama-server) | RSS, q8_0 KV" in head and rule.count("---") == 6
    assert row == "| Llama-3.2-1B | 512 MiB | 32 KiB | 803 MB | 1,800 / 1,751 MB | 1,500 / 1,450 MB |"


def test_results_files_of_several_runs_make_one_table_at_the_same_slots_and_context() -> None:
    small = {"settings": {"max_concurrent": 8, "ctx_per_seq": 2048}, "shapes": {"a": 1, "b": 2}}
    large = {"settings": {"max_concurrent": 8, "ctx_per_seq": 2048}, "shapes": {"b": 3, "c": 4}}
    assert shapes.merged([small, large])["shapes"] == {"a": 1, "b": 3, "c": 4}
    other = {"settings": {"max_concurrent": 4, "ctx_per_seq": 2048}, "shapes": {"c": 4}}
    with pytest.raises(ValueError, match="max_concurrent 4 and 8"):
        shapes.merged([small, other])


def test_the_docs_measured_table_is_the_results_files() -> None:
    """docs/guides/your-own-model.md's measured table is what `shapes.py --table` makes of the results
    committed beside it: a new run's figures reach the page, or this fails."""
    root = Path(__file__).resolve().parents[3]
    results = sorted((root / "benchmarks" / "results").glob("shapes*.json"))
    want = shapes.kv_table(shapes.merged([json.loads(path.read_text()) for path in results]))
    page = (root / "docs" / "guides" / "your-own-model.md").read_text()
    assert want.splitlines()[0] in page, "the page has no measured table"
    assert want in page
