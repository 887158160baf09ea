"""How far batch shape alone moves the logits: the figure the batching tests' near-tie bound rests on.

For each prompt: a greedy completion alone, then the same prompt decoded beside 7 others (as
tests/integration/test_batching.py does), both with the top-20 logprobs of every step. Until the two
paths diverge they see the same tokens, so at every such step the drift of the gap between alone's two
best candidates is |gap_alone - gap_batched|: a greedy choice can only flip where that drift exceeds the
gap. Prints one JSON document: drift percentiles and maximum, the flips seen with their gaps, and the
suggested bound (maximum drift x margin).

    python benchmarks/batch_drift.py --rounds 40 [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from llmhost.bench.load.workload import builtin_prompts
from tests.integration.conftest import start_server, stop_server

N_TOKENS = 24
MARGIN = 2.0


def complete(url: str, prompt: str) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": N_TOKENS, "temperature": 0, "logprobs": 20, "ignore_eos": True}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
    r.raise_for_status()
    lp: dict[str, Any] = r.json()["choices"][0]["logprobs"]
    return lp


def compare(alone: dict[str, Any], batched: dict[str, Any]) -> tuple[list[float], list[float]]:
    """(gap drifts at every shared step, alone's top-2 gaps where the choice flipped)."""
    drifts: list[float] = []
    for step, (ta, tb) in enumerate(zip(alone["tokens"], batched["tokens"], strict=True)):
        top_a, top_b = alone["top_logprobs"][step], batched["top_logprobs"][step]
        first, second = sorted(top_a, key=lambda t: -top_a[t])[:2]
        if first in top_b and second in top_b:
            gap_a = top_a[first] - top_a[second]
            drifts.append(abs(gap_a - (top_b[first] - top_b[second])))
        if ta != tb:
            return drifts, [top_a[first] - top_a[second]]
    return drifts, []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--threads", default="1")
    args = ap.parse_args()
    prompts = [p for p, _ in builtin_prompts()]
    tmp = Path("/tmp/llmhost-batch-drift")
    tmp.mkdir(exist_ok=True)
    srv = start_server(tmp, "--threads", args.threads, "--max-concurrent", "8", "--prefix-cache-seqs", "0")
    drifts: list[float] = []
    flips: list[float] = []
    try:
        for r in range(args.rounds):
            target = prompts[r % len(prompts)][:400]
            others = [prompts[(r + k) % len(prompts)][:400] + f" ({k})" for k in range(1, 8)]
            alone = complete(srv.url, target)
            with ThreadPoolExecutor(8) as pool:
                futures = [pool.submit(complete, srv.url, p) for p in [target, *others]]
                batched = futures[0].result()
                for f in futures[1:]:
                    f.result()
            d, f = compare(alone, batched)
            drifts += d
            flips += f
    finally:
        stop_server(srv)
    arr = np.array(drifts)
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "tokens_per_request": N_TOKENS,
                "threads": args.threads,
                "steps_compared": len(drifts),
                "gap_drift": {
                    "median": float(np.median(arr)),
                    "p99": float(np.percentile(arr, 99)),
                    "p999": float(np.percentile(arr, 99.9)),
                    "max": float(arr.max()),
                },
                "flips": len(flips),
                "flip_gaps": sorted(flips),
                "mean_flip_gap": statistics.mean(flips) if flips else None,
                "suggested_bound": round(float(arr.max()) * MARGIN, 3),
                "margin": MARGIN,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
