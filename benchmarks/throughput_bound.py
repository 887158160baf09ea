"""The most output tokens/s llama.cpp gives `serve_compare.py`'s workloads on this machine, whatever
server drives it, set against what both servers measured there: which llmhost / llama-server ratios the
machine allows at all.

The default model is loaded in-process with one KV stream per sequence and flash attention (as both
servers run it), and each workload's requests are computed on the cheapest schedule there is: waves of
`--concurrency` requests, every prompt of a wave prefilled in one llama_decode (llama.cpp splits it
into micro-batches of every stream at once, and all first tokens come out of one pass of the output
matrix), then decode steps of the whole wave until each has its tokens. Nothing else runs: no HTTP, no
queueing, no scheduling, no copy between streams (the shared prompt is computed into every stream
before the clock starts). Each row's logits are read as the greedy pick (numpy argmax), as a server
must. A concurrency-8 server cannot decode more than 8 sequences at once, and a prompt split over more
calls costs at least as much (measured: 8 prompts of 200 tokens, 2.47-2.59 s however cut), so no
schedule of this work is cheaper; a server adds at least its HTTP, queueing and bookkeeping.

- `distinct`: `serve_compare`'s distinct prompts at concurrency 8 (24 requests of 200 tokens, 64 new);
- `shared_prefix`: its ~1000-token system prompt (computed once, outside the clock) then 24 questions
  of 50 tokens, 50 new tokens each.

The time of the whole schedule, median of `--repeats`, gives the bound; the figures measured by
`serve_compare.py` (`--compare`, its results file: median output tokens/s over rounds) give each
server's share of it.

`--concurrency 1` gives the bound of serve_compare's concurrency-1 level (one request at a time: its
prompt in one call, then one decode call a token), the distinct workload only: serve_compare runs the
shared prefix at its full concurrency alone.

    .venv/bin/python benchmarks/throughput_bound.py --threads 2
    .venv/bin/python benchmarks/throughput_bound.py --threads 2 --concurrency 1 \
        --compare benchmarks/results/serve_compare_c1.json --out benchmarks/results/throughput_bound_c1.json
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

import numpy as np

from llmhost.engine import EngineConfig, LlamaModel
from llmhost.engine.kv.prefix_cache import KvTrim
from llmhost.store import resolve_model

RESULTS = Path(__file__).parent / "results" / "throughput_bound.json"
COMPARE = Path(__file__).parent / "results" / "serve_compare_rounds.json"
# serve_compare.py's workloads at concurrency 8: (prefix tokens shared by all, prompt tokens of each,
# new tokens of each, requests)
WORKLOADS = {"distinct": (0, 200, 64, 24), "shared_prefix": (1000, 50, 50, 24)}


class Schedule:
    """Waves of `width` sequences on streams 0..width-1 after a shared prefix of `prefix` tokens."""

    def __init__(self, model: LlamaModel, width: int, prefix: int, seed: int) -> None:
        self.model = model
        self.width = width
        self.prefix = prefix
        self.rng = random.Random(seed)
        shared = self.tokens(prefix)
        for seq in range(width):  # the shared prompt in every stream, outside the clock
            for off in range(0, prefix, model.n_batch):
                model.decode([(shared[off : off + model.n_batch], off, seq, 0)])

    def tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(1000, self.model.n_vocab - 1000) for _ in range(n)]

    def wave(self, prompt: int, new: int) -> None:
        """One wave: every prompt in one call, then decode steps of all until each has `new` tokens."""
        model, seqs = self.model, range(self.width)
        out = model.decode([(self.tokens(prompt), self.prefix, s, 1) for s in seqs])
        picks = [int(np.argmax(model.logits(i))) for i in out]
        pos = self.prefix + prompt
        for _ in range(new - 1):
            out = model.decode([([picks[s]], pos, s, 1) for s in seqs])
            picks = [int(np.argmax(model.logits(i))) for i in out]
            pos += 1
        for s in seqs:
            model.apply(KvTrim(s, self.prefix))

    def run(self, prompt: int, new: int, requests: int) -> float:
        t = time.perf_counter()
        for _ in range(-(-requests // self.width)):
            self.wave(prompt, new)
        return time.perf_counter() - t


def bound(args: argparse.Namespace, name: str) -> dict[str, Any]:
    prefix, prompt, new, requests = WORKLOADS[name]
    width = args.concurrency
    cfg = EngineConfig(
        max_concurrent=width,
        prefix_cache_seqs=0,
        max_total_tokens=prefix + prompt + new + 16,
        max_input_tokens=prefix + prompt,
        max_batch_tokens=max(512, width * prompt),
        n_threads=args.threads,
        flash_attn=True,  # as `llmhost serve` and llama-server run
    )
    model = LlamaModel(resolve_model(args.model), cfg)
    try:
        schedule = Schedule(model, width, prefix, seed=0)
        schedule.wave(prompt, 4)  # warm-up
        times = [schedule.run(prompt, new, requests) for _ in range(args.repeats)]
    finally:
        model.close()
    seconds = statistics.median(times)
    return {
        "requests": requests,
        "prefix_tokens": prefix,
        "prompt_tokens": prompt,
        "new_tokens": new,
        "seconds": [round(t, 2) for t in times],
        "bound_output_tokens_per_s": round(requests * new / seconds, 1),
    }


def measured(path: Path, concurrency: int) -> dict[str, dict[str, float]]:
    """Median output tokens/s per server and workload over serve_compare's rounds at `concurrency`."""
    if not path.exists():
        return {}
    rounds = json.loads(path.read_text())["rounds"]
    out: dict[str, dict[str, float]] = {}
    for server in rounds[0]:
        figures: dict[str, list[float]] = {"distinct": [], "shared_prefix": []}
        for r in rounds:
            level = next((x for x in r[server]["distinct"] if x["concurrency"] == concurrency), None)
            if level is not None:
                figures["distinct"].append(level["output_tokens_per_s"])
            shared = r[server].get("shared_prefix")
            if shared and shared["concurrency"] == concurrency:
                figures["shared_prefix"].append(shared["output_tokens_per_s"])
        out[server] = {k: round(statistics.median(v), 2) for k, v in figures.items() if v}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compare", type=Path, default=COMPARE, help="serve_compare.py's results file.")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    servers = measured(args.compare, args.concurrency)
    workloads: dict[str, Any] = {}
    # serve_compare runs the shared prefix at its full concurrency (8) only
    for name in WORKLOADS if args.concurrency == 8 else ["distinct"]:
        row = bound(args, name)
        for server, figures in servers.items():
            if name in figures:
                row[f"{server}_output_tokens_per_s"] = figures[name]
                row[f"{server}_share_of_bound"] = round(figures[name] / row["bound_output_tokens_per_s"], 3)
        peer = servers.get("llama-server", {}).get(name)
        if peer:
            row["bound_over_llama_server"] = round(row["bound_output_tokens_per_s"] / peer, 3)
        workloads[name] = row
        print(json.dumps({name: row}), flush=True)
    result = {
        "machine": {"cpus": args.threads, "platform": platform.platform(), "processor": platform.processor()},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "workloads": workloads,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
