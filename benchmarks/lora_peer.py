"""Many LoRA adapters on one copy, over HTTP: llmhost serve against llama.cpp's llama-server, same run.

Both servers load the same 16 adapters at start (llama-server `--lora F --lora-init-without-apply`,
llmhost `--lora aN=F`) on the same base GGUF, same threads, 8 slots. Each request is a streamed
`/v1/completions` with distinct ~100-token prompts, temperature 0, EOS ignored, and llama-server's
per-request `lora: [{id, scale}]` list (the same body for both servers; llmhost takes that list too).
A closed loop of `--concurrency` users sends `--requests` requests per mix; request i uses the mix's
adapter i mod k. Mixes: the base alone, all on one adapter, spread evenly over 4 and over 16 adapters.

Rounds are interleaved (llmhost then llama-server, every mix, per round); each figure is the median
over rounds, after one unmeasured pass of every mix on each server. Output tokens/s counts the asked
tokens (EOS ignored, usage checked when a server sends it). Adapters: random rank-16 updates of every
attention (q, k, v, o) and FFN (gate, up, down) weight, stored F16 as convert_lora_to_gguf.py writes
them by default.

    .venv/bin/python benchmarks/lora_peer.py --llama-server /path/to/llama-server \
        --out benchmarks/results/lora_peer.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gguf
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_compare import Running

from llmhost.store import resolve_model

TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
MIXES = {"base": 0, "one adapter": 1, "4 adapters": 4, "16 adapters": 16}


def write_adapters(
    base: Path, out: Path, count: int, rank: int, dtype: type[np.floating[Any]] = np.float16
) -> list[Path]:
    """`count` random LoRA GGUFs over TARGETS of `base`, laid out as llama.cpp's convert_lora_to_gguf."""
    reader = gguf.GGUFReader(str(base))
    arch = str(reader.fields["general.architecture"].contents())
    shapes = {
        t.name: (int(t.shape[0]), int(t.shape[1]))
        for t in reader.tensors
        if t.name.split(".")[-2] in TARGETS and t.name.endswith(".weight")
    }
    paths = []
    for i in range(count):
        rng = np.random.default_rng(i)
        path = out / f"a{i}.gguf"
        writer = gguf.GGUFWriter(str(path), arch)
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))
        for name, (n_in, n_out) in sorted(shapes.items()):
            writer.add_tensor(f"{name}.lora_a", rng.normal(0, 0.02, (rank, n_in)).astype(dtype))
            writer.add_tensor(f"{name}.lora_b", rng.normal(0, 0.02, (n_out, rank)).astype(dtype))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        paths.append(path)
    return paths


def commands(args: argparse.Namespace, model: Path, adapters: list[Path]) -> dict[str, list[str]]:
    ctx = args.prompt_words * 2 + args.new_tokens + 64
    return {
        "llmhost": [
            sys.executable,
            "-m",
            "llmhost.cli",
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--threads",
            str(args.threads),
            "--max-concurrent",
            str(args.concurrency),
            "--max-total-tokens",
            str(ctx),
            "--max-input-tokens",
            str(ctx - args.new_tokens),
            "--log-level",
            "warning",
            *[f"--lora=a{i}={p}" for i, p in enumerate(adapters)],
        ],
        "llama-server": [
            args.llama_server,
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "-t",
            str(args.threads),
            "-np",
            str(args.concurrency),
            "-c",
            str(args.concurrency * ctx),
            "--no-webui",
            "--lora-init-without-apply",
            *[x for p in adapters for x in ("--lora", str(p))],
        ],
    }


def prompts(count: int, words: int, salt: int) -> list[str]:
    rng = np.random.default_rng(salt)
    vocab = ["river", "stone", "light", "tower", "window", "garden", "winter", "market", "letter"]
    return [f"Note {salt}-{i}: " + " ".join(rng.choice(vocab, words)) for i in range(count)]


async def one(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, float]:
    t0 = time.perf_counter()
    ttft: float | None = None
    usage: int | None = None
    async with client.stream("POST", url + "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if ttft is None and any(c.get("text") for c in chunk.get("choices", [])):
                ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                usage = int(chunk["usage"]["completion_tokens"])
    if usage is not None and usage != body["max_tokens"]:
        raise RuntimeError(f"{url}: {usage} tokens, asked {body['max_tokens']}")
    return {"ttft": ttft if ttft is not None else float("nan"), "end": time.perf_counter()}


async def mix_run(url: str, k: int, texts: list[str], args: argparse.Namespace) -> dict[str, float]:
    bodies = [
        {
            "prompt": t,
            "max_tokens": args.new_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            **({"lora": [{"id": i % k, "scale": 1.0}]} if k else {}),
        }  # the base: no list, as a user sends it
        for i, t in enumerate(texts)
    ]
    queue = list(reversed(bodies))
    results: list[dict[str, float]] = []
    # a connection per request: llama-server's HTTP library closes idle keep-alive connections, and a
    # request sent on one as it closes is lost ("Server disconnected without sending a response")
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def user() -> None:
            while queue:
                results.append(await one(client, url, queue.pop()))

        t0 = time.perf_counter()
        await asyncio.gather(*(user() for _ in range(args.concurrency)))
        wall = time.perf_counter() - t0
    ttfts = sorted(r["ttft"] for r in results)
    return {
        "output_tok_s": round(len(bodies) * args.new_tokens / wall, 2),
        "ttft_p50_ms": round(1000 * statistics.median(ttfts), 1),
        "ttft_p99_ms": round(1000 * ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], 1),
        "wall_s": round(wall, 2),
    }


def median_of(rounds: list[dict[str, dict[str, dict[str, float]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for server in rounds[0]:
        out[server] = {}
        for mix in rounds[0][server]:
            keys = rounds[0][server][mix]
            out[server][mix] = {m: statistics.median(r[server][mix][m] for r in rounds) for m in keys}
    for server in out:
        base = out[server]["base"]["output_tok_s"]
        for row in out[server].values():
            row["vs_base"] = round(row["output_tok_s"] / base, 3)
    if len(out) < 2:
        return out
    out["llmhost_vs_llama_server"] = {
        mix: round(out["llmhost"][mix]["output_tok_s"] / out["llama-server"][mix]["output_tok_s"], 3)
        for mix in MIXES
    }
    return out


def publish(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """The figures with the machine and settings they came from: printed, and written to --out."""
    doc = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()},
        "settings": {k: str(v) for k, v in vars(args).items()},
        **figures,
    }
    text = json.dumps(doc, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--prompt-words", type=int, default=60)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", default="llmhost,llama-server")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    model = Path(resolve_model())
    with tempfile.TemporaryDirectory() as tmp:
        adapters = write_adapters(model, Path(tmp), 16, args.rank)
        chosen = args.servers.split(",")
        servers = {n: Running(n, cmd) for n, cmd in commands(args, model, adapters).items() if n in chosen}
        try:
            for s in servers.values():
                s.wait_ready()
            for s in servers.values():  # first requests (graph builds, adapter uploads) not counted
                for k in MIXES.values():
                    asyncio.run(mix_run(s.url, k, prompts(args.concurrency, 8, salt=10_000 + k), args))
            rounds = []
            for r in range(args.rounds):
                row: dict[str, dict[str, dict[str, float]]] = {name: {} for name in servers}
                for mix, k in MIXES.items():
                    texts = prompts(args.requests, args.prompt_words, salt=r * 100 + k)
                    for name, s in servers.items():
                        row[name][mix] = asyncio.run(mix_run(s.url, k, texts, args))
                        print(r, name, mix, row[name][mix], file=sys.stderr, flush=True)
                rounds.append(row)
        finally:
            for s in servers.values():
                s.stop()
    publish(args, {"median": median_of(rounds), "rounds": rounds})


if __name__ == "__main__":
    main()
