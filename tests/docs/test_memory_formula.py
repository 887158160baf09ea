"""The memory formula of docs/guides/your-own-model.md is llmhost's: the page's kv_memory.py gives the
default model's KV bytes per token as the engine computes them (src/llmhost/engine/llamacpp/gguf_meta.py), and
the KV size a started engine logs; the page's table is that formula applied to each row's shape."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from llmhost.engine import EngineConfig
from llmhost.engine.kv.memory_fit import gguf_kv_shape
from llmhost.engine.llamacpp.gguf_check import check_file
from llmhost.engine.loop import load_engine
from llmhost.store.resolve import default_model_path
from tests.docs.runner import ROOT, blocks
from tests.tinymodels import smollm2_gguf

PAGE = ROOT / "docs" / "guides" / "your-own-model.md"


@pytest.fixture(scope="module")
def formula() -> dict[str, Any]:
    [block] = [b for b in blocks(PAGE) if b.attrs.get("file") == "kv_memory.py"]
    namespace: dict[str, Any] = {"__name__": "kv_memory"}
    exec(compile(block.code, block.where, "exec"), namespace)
    return namespace


def smollm2() -> str:
    return str(smollm2_gguf())


# bytes per token from the models' published shapes: Gemma 3 270M 18 layers x 1 KV head x (256 + 256),
# SmolLM2 135M 30 layers x 3 KV heads x (64 + 64) (its GGUF gives no head sizes: 576 wide / 9 heads)
MODELS = [(lambda: str(default_model_path()), 2 * 18 * 1 * 512), (smollm2, 2 * 30 * 3 * 128)]


@pytest.mark.parametrize(("path", "want"), MODELS, ids=["gemma3-270m", "smollm2-135m"])
def test_the_pages_kv_formula_is_the_engines_and_what_it_logs(
    formula: dict[str, Any], caplog: pytest.LogCaptureFixture, path: Callable[[], str], want: int
) -> None:
    config = EngineConfig(
        max_concurrent=2,
        prefix_cache_seqs=1,
        max_input_tokens=1024,
        max_total_tokens=2048,
        max_batch_tokens=64,
        n_threads=1,
        prompt_cache_mb=0,
    )
    per_token = formula["kv_bytes_per_token"](path())
    with caplog.at_level(logging.INFO):
        engine = load_engine(path(), config)
    try:
        assert per_token == engine.model.kv_bytes_per_token == want
        # the on-demand estimate's reading of the GGUF is the shape the engine sizes its KV by
        assert gguf_kv_shape(check_file(path()).metadata) == engine.model.kv_shape
        # the size llama.cpp allocated, in MiB to one decimal
        logged = re.search(r"KV cache: (\d+) streams .* x (\d+) tokens, .* ([\d.]+) MiB", caplog.text)
        assert logged is not None, caplog.text
        streams, tokens, mib = int(logged[1]), int(logged[2]), float(logged[3])
        assert (streams, tokens) == (3, 2048)
        assert formula["kv_mib"](per_token, 2, 1, 2048) == 3 * 2048 * want // 2**20
        # Gemma 3's 15 sliding-window layers of 18 hold its 512-position window and a 64-token micro-batch,
        # rounded up to 256 cells (768); SmolLM2 has none: every position
        layers, swa_layers, window = formula["sliding_window"](path())
        assert (layers, swa_layers) == (engine.model.kv_shape.layers, engine.model.kv_shape.swa_layers)
        windowed = formula["windowed_kv_mib"](per_token, layers, swa_layers, window, 3, 2048, 64)
        assert mib == pytest.approx(windowed, abs=0.05)
        if swa_layers:
            assert windowed == 3 * (3 * 2048 + 15 * 768) * 1024 / 2**20
            assert windowed < formula["kv_mib"](per_token, 2, 1, 2048)
    finally:
        engine.close()
    # the defaults, as the page gives them (the table's first row; SmolLM2's printed figure)
    assert formula["kv_mib"](per_token) == {18 * 1024: 576, 23040: 720}[want]
    assert EngineConfig().n_ctx == 8 * 4096


NUM = r" \| ([\d,]+)"
ROW = re.compile(r"^\| ([^|]+?) \| (\d+) \| (\d+) \| (\d+) \| (\d+) KiB" + NUM * 4 + r" \|", re.M)


def test_the_pages_table_is_the_formula(formula: dict[str, Any]) -> None:
    rows = ROW.findall(PAGE.read_text())
    assert [r[0] for r in rows] == ["Gemma 3 270M", "Llama 3.2 1B", "Llama 3.2 3B", "Llama 3.1 8B"]
    for name, layers, heads, head_sizes, kib, *mibs in rows:
        per_token = 2 * int(layers) * int(heads) * int(head_sizes)
        assert per_token == int(kib) * 1024, name
        want = [
            formula["kv_mib"](per_token, seqs, 0, ctx)
            for seqs, ctx in ((8, 4096), (1, 4096), (8, 32768), (1, 32768))
        ]
        assert [int(m.replace(",", "")) for m in mibs] == want, name
