"""Copies against threads, and what the endpoint's router costs.

On this host's CPUs (2 here), with `llmhost bench` at concurrency 8 through the endpoint router:
one copy with 2 threads (num_cpus: 2) against two copies with 1 thread each (num_cpus: 1), output
tokens/s and p50 ms/token. Then the router's added latency: one copy with 1 thread called directly and
through the router, one request at a time, p50 end-to-end and TTFT in ms (median of three interleaved
rounds).
The load generator runs on the same CPUs as the copies, the same way for every configuration.

Where the time goes: for each configuration, the CPU seconds spent by the router (the `endpoint up`
process), by every copy and by the load generator (this process) while the level ran, per request
and as a share of the host's CPUs; two copies called directly (the load generator splits the
users between them, no router) to show what the router itself costs; and one copy with one thread at
half and at the full concurrency, which splits the one-copy-vs-two question into what a bigger batch
gains and what a second thread per copy loses.
Prints one JSON object (and writes it to benchmarks/results/endpoint_copies.json).

    python benchmarks/endpoint_copies.py [--requests 32] [--concurrency 8] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
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
import psutil

from llmhost.bench import BenchConfig, run_benchmark
from llmhost.web.auth import ENV_KEYS

ENGINE = "{max_input_tokens: 256, max_total_tokens: 512, max_batch_tokens: 512, max_concurrent: 8}"


def copy_headers(replica: dict[str, Any]) -> dict[str, str]:
    """A copy takes only the endpoint's internal key, kept in its environment (readable by its own
    user only, like the key): what calling a copy without the router needs."""
    return {"x-api-key": psutil.Process(int(replica["pid"])).environ()[ENV_KEYS]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def endpoint_yaml(copies: int, num_cpus: int) -> str:
    return (
        "name: bench\ncomponents:\n  - name: gemma\n    model: default\n"
        f"    copies: {copies}\n    resources: {{num_cpus: {num_cpus}, memory_mb: 600}}\n"
        f"    engine: {ENGINE}\n    startup_health_check_timeout_s: 120\n"
    )


class Endpoint:
    def __init__(self, tmp: Path, copies: int, num_cpus: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        file = tmp / f"endpoint-{copies}x{num_cpus}.yaml"
        file.write_text(endpoint_yaml(copies, num_cpus))
        self.log = tmp / f"endpoint-{copies}x{num_cpus}.log"
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
            str(self.port),
            "--log-dir",
            str(tmp / "copies"),
            "--log-level",
            "warning",
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"endpoint exited:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/ping", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.close()
        raise RuntimeError(f"endpoint not ready:\n{self.log.read_text()}")

    def replicas(self) -> list[dict[str, Any]]:
        status = httpx.get(f"{self.url}/admin/status", timeout=10).json()
        return [r for c in status["components"] for r in c["replicas"]]

    def copies(self) -> list[tuple[str, dict[str, str]]]:
        """Each copy's URL and the headers that reach it directly (the endpoint's internal key)."""
        return [(f"http://127.0.0.1:{r['port']}", copy_headers(r)) for r in self.replicas()]

    def processes(self) -> dict[str, psutil.Process]:
        procs = {"router": psutil.Process(self.proc.pid)}
        procs.update({f"copy{i}": psutil.Process(r["pid"]) for i, r in enumerate(self.replicas())})
        return procs

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def bench(
    url: str,
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    max_new_tokens: int,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    cfg = BenchConfig(
        url=url,
        api="openai",
        model="gemma",
        concurrency=[concurrency],
        requests=requests,
        warmup=min(concurrency, 4),
        prompt_tokens=prompt_tokens,
        max_new_tokens=max_new_tokens,
        temperature=0.0,
        headers=headers or {},
    )
    [level] = run_benchmark(cfg, out_dir=None).levels()

    def ms(key: str) -> float | None:
        v = level.get(key)
        return round(v * 1000, 2) if v is not None else None

    return {
        "output_tokens_per_s": round(level.output_tokens_per_s, 2),
        "ms_per_token_p50": round(level.get("ms_per_token_p50") or 0.0, 2),
        "ttft_ms_p50": ms("ttft_s_p50"),
        "e2e_ms_p50": ms("e2e_s_p50"),
        "successes": level.successes,
        "errors": dict(level.errors),
    }


def cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def accounted(ep: Endpoint, run: Any) -> dict[str, Any]:
    """``run()``'s figures with the CPU each process spent meanwhile (this process: the load generator)."""
    procs = ep.processes()
    before = {n: cpu_seconds(p) for n, p in procs.items()}
    own0, wall0 = time.process_time(), time.monotonic()
    figures: dict[str, Any] = run()
    wall = time.monotonic() - wall0
    spent = {n: cpu_seconds(p) - before[n] for n, p in procs.items()}
    spent["load_generator"] = time.process_time() - own0
    ok = max(1, figures["successes"])
    figures["cpu_s"] = {n: round(v, 3) for n, v in spent.items()}
    figures["cpu_ms_per_request"] = {n: round(v * 1000 / ok, 2) for n, v in spent.items()}
    host = len(os.sched_getaffinity(0)) * wall
    figures["share_of_host_cpu"] = {n: round(v / host, 3) for n, v in spent.items()}
    figures["wall_s"] = round(wall, 2)
    return figures


def split_bench(
    copies: list[tuple[str, dict[str, str]]],
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    max_new_tokens: int,
) -> dict[str, Any]:
    """The users split evenly between the copies (one load generator thread each), no router."""
    from concurrent.futures import ThreadPoolExecutor

    n = len(copies)
    with ThreadPoolExecutor(n) as pool:
        parts = list(
            pool.map(
                lambda c: bench(
                    c[0], concurrency // n, requests // n, prompt_tokens, max_new_tokens, headers=c[1]
                ),
                copies,
            )
        )
    errors: dict[str, int] = {}
    for p in parts:
        for k, v in p["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "output_tokens_per_s": round(sum(p["output_tokens_per_s"] for p in parts), 2),
        "ms_per_token_p50": round(statistics.median(p["ms_per_token_p50"] for p in parts), 2),
        "ttft_ms_p50": statistics.median(p["ttft_ms_p50"] for p in parts),
        "e2e_ms_p50": statistics.median(p["e2e_ms_p50"] for p in parts),
        "successes": sum(p["successes"] for p in parts),
        "errors": errors,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--latency-requests", type=int, default=16)
    args = ap.parse_args()
    cpus = len(os.sched_getaffinity(0))
    out: dict[str, Any] = {
        "host_cpus": cpus,
        "workload": {
            "concurrency": args.concurrency,
            "requests": args.requests,
            "prompt_tokens": args.prompt_tokens,
            "max_new_tokens": args.max_new_tokens,
        },
    }
    with tempfile.TemporaryDirectory(prefix="endpoint-copies-") as tmp_name:
        tmp = Path(tmp_name)
        work = (args.concurrency, args.requests, args.prompt_tokens, args.max_new_tokens)
        ep = Endpoint(tmp, copies=1, num_cpus=cpus)
        try:
            out[f"one_copy_x_{cpus}_threads"] = accounted(ep, lambda: bench(ep.url, *work))
        finally:
            ep.close()
        ep = Endpoint(tmp, copies=cpus, num_cpus=1)
        try:
            out[f"{cpus}_copies_x_1_thread"] = accounted(ep, lambda: bench(ep.url, *work))
            copies = ep.copies()
            out[f"{cpus}_copies_x_1_thread_direct"] = accounted(ep, lambda: split_bench(copies, *work))
        finally:
            ep.close()
        ep = Endpoint(tmp, copies=1, num_cpus=1)
        try:
            [(direct_url, direct_headers)] = ep.copies()
            half = (max(1, args.concurrency // cpus), args.requests // cpus, *work[2:])
            out["one_copy_x_1_thread_half_concurrency"] = accounted(
                ep, lambda: bench(direct_url, *half, headers=direct_headers)
            )
            out["one_copy_x_1_thread_full_concurrency"] = accounted(
                ep, lambda: bench(direct_url, *work, headers=direct_headers)
            )
            rounds: dict[str, list[dict[str, Any]]] = {"direct": [], "router": []}
            lat = (1, args.latency_requests, 32, 16)
            for _ in range(3):
                rounds["direct"].append(bench(direct_url, *lat, headers=direct_headers))
                rounds["router"].append(bench(ep.url, *lat))
        finally:
            ep.close()

    def med(side: str, key: str) -> float:
        return float(statistics.median(r[key] for r in rounds[side]))

    out["router_overhead"] = {
        "method": (
            "one copy x 1 thread; concurrency 1, 32-token prompts, 16 new tokens, direct vs via the "
            "router; median over 3 interleaved rounds of the p50"
        ),
        "direct_e2e_ms_p50": round(med("direct", "e2e_ms_p50"), 2),
        "router_e2e_ms_p50": round(med("router", "e2e_ms_p50"), 2),
        "added_e2e_ms_p50": round(med("router", "e2e_ms_p50") - med("direct", "e2e_ms_p50"), 2),
        "direct_ttft_ms_p50": round(med("direct", "ttft_ms_p50"), 2),
        "router_ttft_ms_p50": round(med("router", "ttft_ms_p50"), 2),
        "added_ttft_ms_p50": round(med("router", "ttft_ms_p50") - med("direct", "ttft_ms_p50"), 2),
        "rounds": rounds,
    }
    text = json.dumps(out, indent=2)
    print(text)
    (Path(__file__).parent / "results" / "endpoint_copies.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
