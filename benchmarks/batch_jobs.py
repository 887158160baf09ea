"""A batch behind live traffic: interactive TTFT while a batch runs, against alone; a batch's time,
against the same requests sent at full concurrency (and llama-server's time for them, same run).

Each round, on one `llmhost serve` (a jobs directory of its own) and distinct prompts per phase (no
prefix reuse between phases):
  1. `--interactive` streamed completions, one after another: TTFT alone;
  2. the `--lines` requests sent straight to /v1/completions, `--conc` at a time: their wall time;
  3. the same requests as a batch (/v1/files + /v1/batches) alone: created to completed;
  4. a batch again, and the interactive requests one after another while it runs: their TTFT.
llama-server (`-np --conc`) answers phase 2's requests too, for scale. Each `--interactive-slots` value
(sequences batch work leaves free) gets its own llmhost server and rounds.

    .venv/bin/python benchmarks/batch_jobs.py --llama-server /path/to/llama-server \
        --out benchmarks/results/batch_jobs.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serve_compare import Running, server_commands

from llmhost.store import resolve_model

# about 60 tokens of text: each prompt starts with its own label, so no two share a prefix
BODY_TEXT = (
    "wrote a short report about the harbour, the ships that came in during the week, the weather on the "
    "coast, the prices at the fish market and what the old sailors said about the coming season. Summary:"
)


def prompt(label: str) -> str:
    return f"{label}: the clerk {BODY_TEXT}"


def completion(label: str, new_tokens: int, stream: bool = False) -> dict[str, Any]:
    return {
        "prompt": prompt(label),
        "max_tokens": new_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }


def ttft(url: str, label: str) -> float:
    """Seconds to the first streamed token of one interactive request."""
    start = time.perf_counter()
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=completion(label, 8, stream=True), timeout=300
    ) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if (
                line.startswith("data: ")
                and line != "data: [DONE]"
                and json.loads(line[6:])["choices"][0]["text"]
            ):
                return time.perf_counter() - start
    raise RuntimeError("no token streamed")


def direct(url: str, labels: list[str], new_tokens: int, conc: int) -> float:
    """Wall seconds for the requests sent straight to the server, `conc` at a time."""

    def one(label: str) -> None:
        r = httpx.post(f"{url}/v1/completions", json=completion(label, new_tokens), timeout=600)
        r.raise_for_status()

    start = time.perf_counter()
    with ThreadPoolExecutor(conc) as pool:
        list(pool.map(one, labels))
    return time.perf_counter() - start


def submit_batch(client: OpenAI, labels: list[str], new_tokens: int) -> str:
    lines = [
        json.dumps(
            {
                "custom_id": label,
                "method": "POST",
                "url": "/v1/completions",
                "body": completion(label, new_tokens),
            }
        )
        for label in labels
    ]
    file_id = client.files.create(file=("b.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch").id
    return client.batches.create(
        input_file_id=file_id, endpoint="/v1/completions", completion_window="24h"
    ).id


def wait_batch(client: OpenAI, batch_id: str, n: int) -> None:
    while (batch := client.batches.retrieve(batch_id)).status not in (
        "completed",
        "failed",
        "cancelled",
        "expired",
    ):
        time.sleep(0.05)
    counts = batch.request_counts
    if batch.status != "completed" or counts is None or counts.completed != n:
        raise RuntimeError(f"batch {batch_id}: {batch.status} {counts}")


def batch_alone(client: OpenAI, labels: list[str], new_tokens: int) -> float:
    start = time.perf_counter()
    wait_batch(client, submit_batch(client, labels, new_tokens), len(labels))
    return time.perf_counter() - start


def during_batch(
    url: str, client: OpenAI, labels: list[str], new_tokens: int, asks: list[str]
) -> tuple[list[float], float]:
    """The interactive requests' TTFTs, one after another, while the batch's lines fill the server;
    and the batch's own wall time."""
    start = time.perf_counter()
    batch_id = submit_batch(client, labels, new_tokens)
    while client.batches.retrieve(batch_id).status != "in_progress":
        time.sleep(0.02)
    time.sleep(1.0)  # its lines are running
    times = []
    for label in asks:
        if client.batches.retrieve(batch_id).status != "in_progress":
            break
        times.append(ttft(url, label))
    wait_batch(client, batch_id, len(labels))
    return times, time.perf_counter() - start


def run_llmhost(command: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each round's figures on one llmhost server."""
    rounds: list[dict[str, Any]] = []
    server = Running("llmhost", command)
    try:
        server.wait_ready()
        client = OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
        for r in range(args.rounds):
            alone = [ttft(server.url, f"r{r}-alone-{i}") for i in range(args.interactive)]
            direct_s = direct(
                server.url, [f"r{r}-direct-{i}" for i in range(args.lines)], args.new_tokens, args.conc
            )
            batch_s = batch_alone(client, [f"r{r}-batch-{i}" for i in range(args.lines)], args.new_tokens)
            during, loaded_batch_s = during_batch(
                server.url,
                client,
                [f"r{r}-loaded-{i}" for i in range(args.lines)],
                args.new_tokens,
                [f"r{r}-during-{i}" for i in range(args.interactive)],
            )
            rounds.append(
                {
                    "ttft_alone_s": alone,
                    "ttft_during_batch_s": during,
                    "direct_conc_s": direct_s,
                    "batch_alone_s": batch_s,
                    "batch_with_interactive_s": loaded_batch_s,
                }
            )
            print(json.dumps({k: v for k, v in rounds[-1].items() if not k.startswith("ttft")}), flush=True)
    finally:
        server.stop()
    return rounds


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds of the times, and of the TTFTs (p50, p90, max over every interactive request)."""
    alone = [t for r in rounds for t in r["ttft_alone_s"]]
    during = [t for r in rounds for t in r["ttft_during_batch_s"]]
    med = {
        k: statistics.median(r[k] for r in rounds)
        for k in ("direct_conc_s", "batch_alone_s", "batch_with_interactive_s")
    }
    figures = {
        "ttft_alone_p50_s": statistics.median(alone),
        "ttft_alone_p90_s": statistics.quantiles(alone, n=10)[-1],
        "ttft_during_batch_p50_s": statistics.median(during),
        "ttft_during_batch_p90_s": statistics.quantiles(during, n=10)[-1],
        "ttft_during_batch_max_s": max(during),
        **med,
    }
    figures["ratios"] = {
        "ttft_p50_during_batch_over_alone": figures["ttft_during_batch_p50_s"] / figures["ttft_alone_p50_s"],
        "ttft_p90_during_batch_over_alone": figures["ttft_during_batch_p90_s"] / figures["ttft_alone_p90_s"],
        "batch_alone_over_direct_conc": med["batch_alone_s"] / med["direct_conc_s"],
    }
    figures["rounds"] = rounds
    print(json.dumps({k: v for k, v in figures.items() if k != "rounds"}), flush=True)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lines", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--interactive", type=int, default=8)
    ap.add_argument("--conc", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--interactive-slots", default="0,1", help="llmhost's --interactive-slots values, each a server"
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    model = resolve_model(None)
    slots = [int(x) for x in args.interactive_slots.split(",")]
    results: dict[str, Any] = {}
    for n in slots:
        jobs = tempfile.mkdtemp(prefix="batch-jobs-")
        extra = ["--jobs-dir", jobs, "--interactive-slots", str(n)]
        command = server_commands(
            model, args.threads, args.conc, 512, extra=extra, llama_server=args.llama_server
        )
        results[f"interactive_slots_{n}"] = summarize(run_llmhost(command["llmhost"], args))
    peer = Running(
        "llama-server",
        server_commands(model, args.threads, args.conc, 512, llama_server=args.llama_server)["llama-server"],
    )
    try:
        peer.wait_ready()
        peer_s = [
            direct(peer.url, [f"r{r}-direct-{i}" for i in range(args.lines)], args.new_tokens, args.conc)
            for r in range(args.rounds)
        ]
    finally:
        peer.stop()
    result = {
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "model": str(model),
        "settings": vars(args) | {"out": str(args.out)},
        "llmhost": results,
        "llama_server_direct_conc_s": peer_s,
        "llama_server_direct_conc_p50_s": statistics.median(peer_s),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v["ratios"] for k, v in results.items()}, indent=2))


if __name__ == "__main__":
    main()
