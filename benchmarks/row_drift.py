"""How a token's logits move with what else one llama_decode carries: llama-cpp-python directly.

The last token of a 6-token prompt is decoded alone, then in one call with other tokens (other prompts
before or after it, a short sequence ahead of it, a copy of itself), on the base and under a random
adapter, with weights repacked or not and flash attention off or on; a decode step's token alone and
beside 1 to 5 other sequences' tokens. Prints one JSON document: per configuration and case, the
largest |Δ logit| of that token against alone (0.0: bitwise the same). See docs/guides/lora.md,
"Cached prompts and mixed batches".

    PYTHONPATH=src .venv/bin/python benchmarks/row_drift.py
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapter_agreement import PROMPTS

from llmhost.engine.config import EngineConfig
from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.store import resolve_model
from tests.integration.lora_helpers import write_adapter

Item = tuple[list[int], int, int, int]


def measure(model: Path, repack: bool, flash: bool, adapter: Path | None) -> dict[str, float]:
    cfg = EngineConfig(
        max_concurrent=6,
        prefix_cache_seqs=0,
        prompt_cache_mb=0,
        max_total_tokens=256,
        max_input_tokens=128,
        repack=repack,
        flash_attn=flash,
    )
    m = LlamaModel(model, cfg)
    try:
        if adapter is not None:
            m.use_adapters([(m.load_adapter(str(adapter)), 1.0)])
        toks = [m.tokenize(p) for p in PROMPTS]
        p = toks[0]

        def logits(items: list[Item], k: int) -> Any:
            m.clear()
            return m.logits(m.decode(items)[k]).copy()

        alone = logits([(p, 0, 0, 1)], 0)
        cases: dict[str, tuple[list[Item], int]] = {
            "beside a longer prompt after it": ([(p, 0, 0, 1), (toks[1], 0, 1, 1)], 0),
            "after a longer prompt": ([(toks[1], 0, 0, 1), (p, 0, 1, 1)], 1),
            "beside a copy of itself": ([(p, 0, 0, 1), (p, 0, 1, 1)], 0),
            "beside the 5 other prompts": ([(t, 0, i, 1) for i, t in enumerate(toks)], 0),
        }
        for extra in (1, 2, 3, 4):
            cases[f"after a {extra}-token sequence"] = (
                [(list(range(2, 2 + extra)), 0, 0, 1), (p, 0, 1, 1)],
                1,
            )
        out = {name: float(np.abs(logits(items, k) - alone).max()) for name, (items, k) in cases.items()}

        def step(n_beside: int) -> Any:
            m.clear()
            for i in range(n_beside + 1):
                m.decode([(toks[i], 0, i, 0)])
            return m.logits(m.decode([([2], len(toks[i]), i, 1) for i in range(n_beside + 1)])[0]).copy()

        one = step(0)
        for n in range(1, 6):
            out[f"decode step beside {n}"] = float(np.abs(step(n) - one).max())
        return {k: round(v, 4) for k, v in out.items()}
    finally:
        m.close()


def main() -> None:
    model = resolve_model(None)
    adapter = write_adapter(Path(tempfile.mkdtemp(prefix="row-drift-")) / "a.gguf", model, seed=1)
    results = {}
    for repack, flash, lora in itertools.product((True, False), (False, True), (None, adapter)):
        name = f"repack={int(repack)} flash_attn={int(flash)} adapter={int(lora is not None)}"
        results[name] = measure(model, repack, flash, lora)
        print(name, results[name], file=sys.stderr, flush=True)
    print(json.dumps({"model": str(model), "results": results}, indent=1))


if __name__ == "__main__":
    main()
