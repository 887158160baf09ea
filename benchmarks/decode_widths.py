"""What a decode step costs by the number of sequences in it, and what a gap in their stream ids adds.

The default model is loaded in-process with one KV stream per sequence (llmhost's layout); each of
`--max-seqs` sequences gets a `--context`-token prompt, then decode steps of 1 to `--max-seqs`
sequences are timed (llama_decode only, median of `--repeats` after 2 warm-up steps):

- `consecutive`: sequences 0..n-1, as llmhost keeps its running sequences;
- `gap_in_middle` (n >= 2): the same number of sequences with a free id among them (0..k-1 and
  k+1..n): llama.cpp runs streams in one micro-batch only where their ids run consecutively, so the
  gap splits the step in two.

Every sequence is cut back to its prompt after each measurement, so all are timed at one context.

What it shows on x86 (2 cores, Gemma 3 270M Q4_K_M, whose 262,144-token output matrix is most of a
decode step's work): llama.cpp's CPU matrix kernels take the batch's tokens 4 at a time, and the tokens
past the last multiple of 4 make a second pass over the weights, so 5 to 7 sequences cost about what 8
do; and each micro-batch is a pass of its own, which is why llmhost moves a running sequence down into
a free id below it (`PrefixCache.relocation`).

    .venv/bin/python benchmarks/decode_widths.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

from llmhost.engine import EngineConfig, LlamaModel
from llmhost.engine.kv.prefix_cache import KvTrim
from llmhost.store import resolve_model

RESULTS = Path(__file__).parent / "results" / "decode_widths.json"
WARMUP = 2


class Streams:
    """`n` sequences with a prompt each; `step(ids)` decodes one token for each of `ids`, timed."""

    def __init__(self, model: LlamaModel, n: int, context: int, seed: int) -> None:
        self.model = model
        self.context = context
        self.rng = random.Random(seed)
        self.pos = [0] * n
        for seq in range(n):
            prompt = self.tokens(context)
            for off in range(0, context, model.n_batch):
                chunk = prompt[off : off + model.n_batch]
                model.decode([(chunk, off, seq, 1 if off + len(chunk) == context else 0)])
            self.pos[seq] = context

    def tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(1000, self.model.n_vocab - 1000) for _ in range(n)]

    def step(self, ids: list[int]) -> float:
        items = [(self.tokens(1), self.pos[s], s, 1) for s in ids]
        t = time.perf_counter()
        self.model.decode(items)
        took = time.perf_counter() - t
        for s in ids:
            self.pos[s] += 1
        return took

    def median_ms(self, ids: list[int], repeats: int) -> float:
        times = [self.step(ids) for _ in range(WARMUP + repeats)][WARMUP:]
        for s in ids:
            self.model.apply(KvTrim(s, self.context))
            self.pos[s] = self.context
        return round(1000 * statistics.median(times), 1)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    n = args.max_seqs
    cfg = EngineConfig(
        max_concurrent=n + 1,
        prefix_cache_seqs=0,
        max_total_tokens=args.context + 256,
        max_input_tokens=args.context,
        max_batch_tokens=512,
        n_threads=args.threads,
        flash_attn=True,
    )
    model = LlamaModel(resolve_model(args.model), cfg)
    try:
        streams = Streams(model, n + 1, args.context, seed=0)
        rows = []
        for width in range(1, n + 1):
            row: dict[str, Any] = {"seqs": width}
            row["consecutive_ms"] = streams.median_ms(list(range(width)), args.repeats)
            if width >= 2:
                half = width // 2
                middle = [*range(half), *range(half + 1, width + 1)]
                row["gap_in_middle_ms"] = streams.median_ms(middle, args.repeats)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        model.close()
    return {"rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-seqs", type=int, default=16)
    ap.add_argument("--context", type=int, default=512, help="Prompt tokens of every sequence.")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    result = {
        "machine": {"cpus": args.threads, "platform": platform.platform(), "processor": platform.processor()},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        **measure(args),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
