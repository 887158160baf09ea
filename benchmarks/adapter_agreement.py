"""Greedy answers under LoRA adapters, alone and in a mixed batch: llmhost against llama-server, same run.

The question (does a request's greedy answer change when requests of other adapters run beside it?) is
asked of both servers with the same base GGUF, the same two random adapters and the same requests: six
distinct prompts, two on the base, two on adapter `a`, two on adapter `b`, each with llama-server's
per-request `lora: [{id, scale}]` list (llmhost takes it too). Each request is sent alone first, then
all six at once, `--rounds` times; llmhost runs twice, as configured and with `--isolate-prompts`
(each prompt chunk decoded in a llama.cpp call of its own). Prompt caching is off on both servers (llmhost
`--no-prefix-caching`, llama-server `cache_prompt: false`), so a difference comes
from the batch a request ran in, not from a cached prompt.

For each request and round: whether the batched answer equals the alone answer, and, over the steps
before the first differing token, the largest |Δ log p| between alone and batched of the candidates
both list (top 5), and the top-2 gap where they first differ.

    .venv/bin/python benchmarks/adapter_agreement.py --llama-server /path/to/llama-server \
        --out benchmarks/results/adapter_agreement.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serve_compare import READY_PATH, Running, server_commands

from llmhost.store import resolve_model
from tests.integration.lora_helpers import write_adapter

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "The three most important inventions are",
    "To make bread you need",
    "The ocean is deep because",
    "My favourite season of the year is",
]
# request i runs on the base (None) or an adapter, by its place among the --lora options
ADAPTER_OF = [None, None, 0, 0, 1, 1]
TOP = 5


def body(i: int, new_tokens: int, peer: bool) -> dict[str, Any]:
    chosen = ADAPTER_OF[i]
    lora = [{"id": k, "scale": 1.0 if k == chosen else 0.0} for k in (0, 1)]
    return {
        "prompt": PROMPTS[i],
        "max_tokens": new_tokens,
        "temperature": 0,
        "logprobs": TOP,
        "lora": lora,
        # llama-server's own switch (llmhost refuses a field it does not implement; its caches are
        # turned off by its options instead)
        **({"cache_prompt": False} if peer else {}),
    }


def steps(choice: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """(chosen token, {candidate: log p}) per step, from either server's completion logprobs: OpenAI's
    legacy object (`tokens`, `top_logprobs`) or the per-token list (`content`)."""
    lp = choice["logprobs"]
    if "content" in lp and lp["content"] is not None:
        return [(t["token"], {c["token"]: c["logprob"] for c in t["top_logprobs"]}) for t in lp["content"]]
    return list(zip(lp["tokens"], lp["top_logprobs"], strict=True))


def complete(url: str, i: int, new_tokens: int, peer: bool) -> dict[str, Any]:
    r = httpx.post(f"{url}/v1/completions", json=body(i, new_tokens, peer), timeout=600)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    return {"text": choice["text"], "steps": steps(choice)}


def compare(alone: dict[str, Any], batched: dict[str, Any]) -> dict[str, Any]:
    deltas: list[float] = []
    gap_at_split = None
    for (ta, top_a), (tb, top_b) in zip(alone["steps"], batched["steps"], strict=False):
        deltas += [abs(top_a[k] - top_b[k]) for k in top_a if k in top_b]
        if ta != tb:
            ranked = sorted(top_a.values(), reverse=True)
            gap_at_split = round(ranked[0] - ranked[1], 4) if len(ranked) > 1 else None
            break
    return {
        "same": alone["text"] == batched["text"],
        "max_abs_dlogp": round(max(deltas), 4) if deltas else 0.0,
        "top2_gap_where_split": gap_at_split,
    }


def measure(url: str, rounds: int, new_tokens: int, peer: bool) -> dict[str, Any]:
    alone = [complete(url, i, new_tokens, peer) for i in range(len(PROMPTS))]
    per_round = []
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        for _ in range(rounds):
            batched = list(pool.map(lambda i: complete(url, i, new_tokens, peer), range(len(PROMPTS))))
            per_round.append([compare(a, b) for a, b in zip(alone, batched, strict=True)])
    same = sum(c["same"] for r in per_round for c in r)
    by_kind: dict[str, list[float]] = {"base": [], "adapter": []}
    for r in per_round:
        for i, c in enumerate(r):
            by_kind["base" if ADAPTER_OF[i] is None else "adapter"].append(c["max_abs_dlogp"])
    return {
        "alone": [a["text"] for a in alone],
        "same_as_alone": f"{same} of {rounds * len(PROMPTS)}",
        "max_abs_dlogp": {k: max(v) for k, v in by_kind.items()},
        "rounds": per_round,
    }


def flags(flag: str, values: list[str]) -> list[str]:
    """`flag` before each of `values` (a repeated option)."""
    return [part for value in values for part in (flag, value)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    model = resolve_model(None)
    work = Path(tempfile.mkdtemp(prefix="adapter-agreement-"))
    adapters = [write_adapter(work / f"{n}.gguf", model, seed=s) for n, s in (("a", 1), ("b", 2))]
    named = [f"{name}={path}" for name, path in zip("ab", adapters, strict=True)]
    commands = server_commands(
        model,
        args.threads,
        len(PROMPTS),
        512,
        ["--no-prefix-caching", *flags("--lora", named)],
        peer_extra=[*flags("--lora", [str(p) for p in adapters]), "--lora-init-without-apply"],
        llama_server=args.llama_server,
    )
    servers = {name: commands[name] for name in ("llmhost", "llama-server")}
    # the same server with every prompt chunk decoded apart from other requests' tokens
    servers = {
        "llmhost": servers["llmhost"],
        "llmhost --isolate-prompts": [*servers["llmhost"], "--isolate-prompts"],
    }
    servers["llama-server"] = commands["llama-server"]
    results: dict[str, Any] = {}
    for name, cmd in servers.items():
        running = Running(name, cmd, READY_PATH[name.split()[0]])
        try:
            running.wait_ready()
            results[name] = measure(running.url, args.rounds, args.new_tokens, name == "llama-server")
        finally:
            running.stop()
        print(name, results[name]["same_as_alone"], results[name]["max_abs_dlogp"], flush=True)
    out = {
        "machine": {"cpus": 2, "platform": platform.platform()},
        "settings": {k: str(v) for k, v in vars(args).items()},
        "results": results,
    }
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
