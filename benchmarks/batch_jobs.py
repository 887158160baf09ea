"""A batch behind live traffic: interactive TTFT while a batch runs, against alone; a batch's time,
against the same requests sent at full concurrency (and llama-server's time for them, same run).

Each round, on one `llmhost serve` (a jobs directory of its own) and distinct prompts per phase (no
prefix reuse between phases):
  1. `--interactive` streamed completions, one after another: TTFT alone;
  2. the `--lines` requests sent straight to /v1/completions, `--conc` at a time: their wall time;
  3. the same requests as a batch (/v1/files + /v1/batches) alone: created to completed;
  4. a batch again, and the interactive requests one after another while it runs: their TTFT.
llama-server (`-np --conc`) answers phase 2's requests too, for scale.

    .venv/bin/python benchmarks/batch_jobs.py --llama-server /path/to/llama-server \
        --out benchmarks/results/batch_jobs.json
"""

from __future__ import annotations

import argparse
import io
import json
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lines", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--interactive", type=int, default=8)
    ap.add_argument("--conc", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    model = resolve_model(None)
    jobs = tempfile.mkdtemp(prefix="batch-jobs-")
    commands = server_commands(
        model, args.threads, args.conc, 512, extra=["--jobs-dir", jobs], llama_server=args.llama_server
    )
    rounds: list[dict[str, Any]] = []
    peer_s: list[float] = []
    for name in ("llmhost", "llama-server"):
        server = Running(name, commands[name])
        try:
            server.wait_ready()
            for r in range(args.rounds):
                labels = [f"r{r}-direct-{i}" for i in range(args.lines)]
                if name == "llama-server":
                    peer_s.append(direct(server.url, labels, args.new_tokens, args.conc))
                    continue
                client = OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
                alone = [ttft(server.url, f"r{r}-alone-{i}") for i in range(args.interactive)]
                direct_s = direct(server.url, labels, args.new_tokens, args.conc)
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
                        "ttft_alone_p50_s": statistics.median(alone),
                        "ttft_during_batch_p50_s": statistics.median(during),
                        "ttft_during_batch_max_s": max(during),
                        "interactive_during_batch": len(during),
                        "direct_conc_s": direct_s,
                        "batch_alone_s": batch_s,
                        "batch_with_interactive_s": loaded_batch_s,
                    }
                )
                print(json.dumps(rounds[-1]), flush=True)
        finally:
            server.stop()
    med = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
    result = {
        "host": {"machine": platform.machine(), "cpus": __import__("os").cpu_count()},
        "model": str(model),
        "settings": vars(args) | {"out": str(args.out)},
        "rounds": rounds,
        "llama_server_direct_conc_s": peer_s,
        "medians": med | {"llama_server_direct_conc_s": statistics.median(peer_s) if peer_s else None},
        "ratios": {
            "ttft_during_batch_over_alone": med["ttft_during_batch_p50_s"] / med["ttft_alone_p50_s"],
            "batch_alone_over_direct_conc": med["batch_alone_s"] / med["direct_conc_s"],
            "llmhost_direct_over_llama_server": (
                med["direct_conc_s"] / statistics.median(peer_s) if peer_s else None
            ),
        },
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["ratios"], indent=2))


if __name__ == "__main__":
    main()
