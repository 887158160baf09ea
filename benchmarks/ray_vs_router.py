"""The same endpoint file through llmhost's own router (`endpoint up`) and through Ray Serve
(`endpoint up --ray`, a local Ray on this host), one copy of 2 threads and two copies of 1 thread
(2 CPUs either way), same run.

For each: output tokens/s and TTFT p50/p99 under load (closed loop, `--concurrency` users), then the
latency each adds over calling the server directly: one copy with 1 thread against a plain
`llmhost serve --threads 1` (the same server app Ray's replicas run in-process), one request at a
time, p50 end-to-end and TTFT (median of three rounds). One system runs at a time; the load generator
shares the host's CPUs with it, the same way for all. A run with any failed request stops the benchmark
(no figures are written from it).
Writes benchmarks/results/ray_vs_router.json and prints it.

    .venv/bin/python benchmarks/ray_vs_router.py [--requests 32] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from endpoint_copies import endpoint_yaml, free_port

RESULTS = Path(__file__).parent / "results" / "ray_vs_router.json"
# Ray keeps every process on loopback only with multi-host clusters off (read when Ray is imported)
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60"}
STARTUP_TIMEOUT_S = 300
COPIES = 2  # the two-copy configuration; the one-copy one gets as many threads


class System:
    """A server started for the benchmark and stopped after it: direct, router or ray."""

    def __init__(self, tmp: Path, kind: str, copies: int, num_cpus: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"{kind}-{copies}x{num_cpus}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if kind == "direct":
            cmd = [
                "serve",
                "--threads",
                str(num_cpus),
                "--served-model-name",
                "gemma",
                "--max-input-tokens",
                "256",
                "--max-total-tokens",
                "512",
                "--max-concurrent",
                "8",
            ]
        else:
            file = tmp / f"{kind}-{copies}x{num_cpus}.yaml"
            file.write_text(endpoint_yaml(copies, num_cpus))
            cmd = ["endpoint", "up", str(file), *(["--ray"] if kind == "ray" else [])]
            env |= RAY_ENV if kind == "ray" else {}
        cmd = [
            sys.executable,
            "-m",
            "llmhost.cli",
            *cmd,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self._wait(copies)

    def _wait(self, copies: int) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited:\n{self.log.read_text()[-4000:]}")
            if self._ready(copies):
                return
            time.sleep(0.5)
        self.close()
        raise RuntimeError(f"not ready:\n{self.log.read_text()[-4000:]}")

    def _ready(self, copies: int) -> bool:
        try:
            if httpx.get(f"{self.url}/ping", timeout=2).status_code != 200:
                return False
            status = httpx.get(f"{self.url}/admin/status", timeout=5)
        except httpx.TransportError:
            return False
        if status.status_code == 404:  # a plain server: /ping 200 is enough
            return True
        comps = status.json().get("components", [])
        # "ready" for llmhost's own copies, "RUNNING" for Ray Serve's replicas
        running = [r for c in comps for r in c.get("replicas", []) if r.get("state") in ("ready", "RUNNING")]
        return len(running) >= copies

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class FailedRun(RuntimeError):
    """A measured run had failed requests: its figures would not describe the system."""


def measure(url: str, concurrency: int, requests: int, prompt_tokens: int, new_tokens: int) -> dict[str, Any]:
    from llmhost.bench import BenchConfig, run_benchmark

    cfg = BenchConfig(
        url=url,
        api="openai",
        model="gemma",
        concurrency=[concurrency],
        requests=requests,
        warmup=min(concurrency, 4),
        prompt_tokens=prompt_tokens,
        max_new_tokens=new_tokens,
        temperature=0.0,
        server_metrics=False,
    )
    [level] = run_benchmark(cfg, out_dir=None).levels()

    def ms(key: str) -> float | None:
        v = level.get(key)
        return round(v * 1000, 2) if v is not None else None

    if level.errors or level.successes != requests:
        errors = dict(level.errors)
        raise FailedRun(f"{url}: {level.successes} of {requests} requests succeeded; errors: {errors}")
    return {
        "output_tokens_per_s": round(level.output_tokens_per_s, 2),
        "ttft_ms_p50": ms("ttft_s_p50"),
        "ttft_ms_p99": ms("ttft_s_p99"),
        "tpot_ms_p50": ms("tpot_s_p50"),
        "e2e_ms_p50": ms("e2e_s_p50"),
        "successes": level.successes,
        "errors": dict(level.errors),
    }


def under_load(tmp: Path, kind: str, copies: int, num_cpus: int, args: argparse.Namespace) -> dict[str, Any]:
    system = System(tmp, kind, copies, num_cpus)
    try:
        return measure(system.url, args.concurrency, args.requests, args.prompt_tokens, args.max_new_tokens)
    except FailedRun as exc:
        what, log = f"{kind}, {copies} copies x {num_cpus} threads", system.log.read_text()[-3000:]
        raise FailedRun(f"{what}: {exc}; its log ends:\n{log}") from None
    finally:
        system.close()


def latency(tmp: Path, kind: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    system = System(tmp, kind, 1, 1)
    try:
        return [measure(system.url, 1, args.latency_requests, 32, 16) for _ in range(3)]
    except FailedRun as exc:
        raise FailedRun(f"{kind}, latency: {exc}; its log ends:\n{system.log.read_text()[-3000:]}") from None
    finally:
        system.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--latency-requests", type=int, default=16)
    args = ap.parse_args()
    cpus = len(os.sched_getaffinity(0))
    if cpus < COPIES:
        raise SystemExit(f"{COPIES} copies of one thread need {COPIES} CPUs; this process may use {cpus}")
    out: dict[str, Any] = {"host_cpus": cpus, "settings": vars(args), "under_load": {}, "latency": {}}
    with tempfile.TemporaryDirectory(prefix="ray-vs-router-") as tmp_name:
        tmp = Path(tmp_name)
        for kind in ("router", "ray"):
            out["under_load"][f"{kind}_1_copy_x_{COPIES}_threads"] = under_load(tmp, kind, 1, COPIES, args)
            out["under_load"][f"{kind}_{COPIES}_copies_x_1_thread"] = under_load(tmp, kind, COPIES, 1, args)
        rounds = {kind: latency(tmp, kind, args) for kind in ("direct", "router", "ray")}

    def med(kind: str, key: str) -> float:
        return round(float(statistics.median(r[key] for r in rounds[kind])), 2)

    for kind in ("direct", "router", "ray"):
        out["latency"][kind] = {
            "e2e_ms_p50": med(kind, "e2e_ms_p50"),
            "ttft_ms_p50": med(kind, "ttft_ms_p50"),
        }
    for kind in ("router", "ray"):
        out["latency"][f"{kind}_adds_e2e_ms"] = round(
            med(kind, "e2e_ms_p50") - med("direct", "e2e_ms_p50"), 2
        )
        out["latency"][f"{kind}_adds_ttft_ms"] = round(
            med(kind, "ttft_ms_p50") - med("direct", "ttft_ms_p50"), 2
        )
    out["latency"]["method"] = (
        "one copy x 1 thread; concurrency 1, 32-token prompts, 16 new tokens; median over 3 rounds of the p50"
    )
    out["latency"]["rounds"] = rounds
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
