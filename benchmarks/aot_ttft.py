"""Time from process start to first token: an AOT artifact (saved system-prompt KV state) vs a cold start.

Builds (or reuses) an artifact of the default model with a ~1000-token system prompt, then, alternately
and `--rounds` times each, starts `llmhost serve ARTIFACT_DIR` and `llmhost serve ARTIFACT_DIR/model.gguf`
(the same GGUF without the state), sends one streamed request = system prompt + a question as soon as
/ping answers, and records process start → first streamed token. Prints JSON with medians and the
reduction (target: >= 40% less time to first token).

    .venv/bin/python benchmarks/aot_ttft.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from llmhost.bench.load.workload import builtin_prompts
from llmhost.optimize.artifact import Recipe, build_or_reuse
from llmhost.store import resolve_model

SYSTEM_CHARS = 4200  # about 1000 Gemma tokens of the built-in prompt corpus
QUESTION = "\nQuestion: summarise the first request above in one sentence.\nAnswer:"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_to_first_token(model: str, prompt: str, threads: int) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "serve",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        str(threads),
        "--log-level",
        "warning",
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{model}: server exited with {proc.returncode}")
            try:
                if httpx.get(f"{url}/ping", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        ready = time.perf_counter()
        body = {
            "prompt": prompt,
            "max_tokens": 4,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        first = 0.0
        cached = 0
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if not first and chunk["choices"] and chunk["choices"][0]["text"]:
                    first = time.perf_counter()
                if chunk.get("usage"):
                    cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
        return {
            "ready_s": ready - t0,
            "first_token_s": first - t0,
            "ttft_after_ready_s": first - ready,
            "cached_tokens": cached,
        }
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="artifact directory (default: a temporary one)")
    args = ap.parse_args()
    system = "\n\n".join(text for text, _ in builtin_prompts())[:SYSTEM_CHARS]
    recipe = Recipe(system_prompt=system, system_prompt_mode="raw")
    out = Path(args.out or tempfile.mkdtemp(prefix="aot-artifact-"))
    t0 = time.perf_counter()
    art = build_or_reuse(resolve_model("default"), out, recipe, threads=args.threads)
    build_s = time.perf_counter() - t0
    prompt = system + QUESTION
    runs: dict[str, list[dict[str, float]]] = {"artifact": [], "cold": []}
    for _ in range(args.rounds):  # interleaved, so drift hits both alike
        runs["artifact"].append(start_to_first_token(str(out), prompt, args.threads))
        runs["cold"].append(start_to_first_token(str(out / "model.gguf"), prompt, args.threads))

    def med(name: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs[name]), 4)

    summary: dict[str, Any] = {
        name: {k: med(name, k) for k in ("ready_s", "first_token_s", "ttft_after_ready_s", "cached_tokens")}
        for name in runs
    }
    reduction = 1 - summary["artifact"]["first_token_s"] / summary["cold"]["first_token_s"]
    print(
        json.dumps(
            {
                "machine": {"platform": platform.platform(), "threads": args.threads},
                "artifact": {
                    "directory": str(out),
                    "key": art.key[:12],
                    "reused": art.reused,
                    "build_s": round(build_s, 2),
                    "system_prompt_tokens": art.info.get("prefix_state", {}).get("tokens"),
                },
                "rounds": args.rounds,
                "median": summary,
                "start_to_first_token_reduction": round(reduction, 3),
                "runs": runs,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
