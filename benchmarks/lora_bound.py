"""The most a mix of LoRA adapters can get out of llama.cpp here, whatever server drives it.

llama.cpp applies adapters to a whole context (`llama_set_adapters_lora`): every token of one
`llama_decode` goes through the same adapter set, so 8 sequences spread over k adapter sets need at
least k decode calls of 8/k sequences per generated token each, where the base alone needs one call of
8. This times decode calls of `w` sequences (one new token each, at a short context) with no adapter
and with one adapter applied, in-process with nothing else running, and gives the ratio a k-way mix can
reach at best against the base: t_base(8) / (k * t_adapter(8 / k)), with adapters stored F16 (as
convert_lora_to_gguf.py writes them by default); the same adapter stored F32 is timed too.

    .venv/bin/python benchmarks/lora_bound.py --out benchmarks/results/lora_bound.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lora_peer import publish, write_adapters

from llmhost.engine import EngineConfig, LlamaModel
from llmhost.engine.kv.prefix_cache import KvTrim
from llmhost.store import resolve_model

CONTEXT = 128  # tokens in each sequence's KV before the timed calls


def call_ms(model: LlamaModel, width: int, repeats: int) -> float:
    """Median ms of one decode call of `width` sequences, one token each at position CONTEXT (taken
    back out of the KV after each call)."""
    times = []
    for i in range(repeats):
        batch = [([1000 + i], CONTEXT, s, 1) for s in range(width)]
        t = time.perf_counter()
        model.decode(batch)
        times.append(time.perf_counter() - t)
        for s in range(width):
            model.apply(KvTrim(s, CONTEXT))
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=31)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    base = Path(resolve_model())
    cfg = EngineConfig(
        max_concurrent=8,
        prefix_cache_seqs=0,
        max_total_tokens=CONTEXT + 8,
        max_input_tokens=CONTEXT,
        max_batch_tokens=512,
        n_threads=args.threads,
        flash_attn=True,
    )
    model = LlamaModel(base, cfg)
    widths = (1, 2, 4, 8)
    rows: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        adapters = {
            f"adapter {dt.__name__}": model.load_adapter(str(write_adapters(base, d, 1, args.rank, dt)[0]))
            for dt in (np.float16, np.float32)
            if (d := Path(tmp) / dt.__name__).mkdir() is None
        }
        for s in range(8):  # each sequence's context, computed before the clock
            model.decode([([1000 + j for j in range(CONTEXT)], 0, s, 0)])
        for name, adapter in (("base", None), *adapters.items()):
            model.use_adapters([(adapter, 1.0)] if adapter is not None else [])
            call_ms(model, 8, 3)  # warm-up: graph of this adapter set
            rows[name] = {w: round(call_ms(model, w, args.repeats), 2) for w in widths}
            model.use_adapters([])
        for adapter in adapters.values():
            model.free_adapter(adapter)
    model.close()
    mixes: dict[str, Any] = {}
    for k in (1, 2, 4, 8):
        per = 8 // k
        mixes[f"{k} adapter sets"] = round(rows["base"][8] / (k * rows["adapter float16"][per]), 3)
    publish(args, {"decode_call_ms": rows, "best_mix_vs_base_at_8": mixes})


if __name__ == "__main__":
    main()
