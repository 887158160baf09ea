"""Copies against threads, and what the endpoint's router costs.

On this host's CPUs (2 here), with `llmhost bench` at concurrency 8 through the endpoint router:
one copy with 2 threads (num_cpus: 2) against two copies with 1 thread each (num_cpus: 1), output
tokens/s and p50 ms/token. Then the router's added latency: one copy with 1 thread called directly and
through the router, one request at a time, p50 end-to-end and TTFT in ms (median of three interleaved
rounds).
The load generator runs on the same CPUs as the copies, the same way for every configuration.
Prints one JSON object.

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

from llmhost.bench import BenchConfig, run_benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.integration.endpoint_helpers import copy_headers

ENGINE = "{max_input_tokens: 256, max_total_tokens: 512, max_batch_tokens: 512, max_concurrent: 8}"


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
        cmd = [sys.executable, "-m", "llmhost.cli", "endpoint", "up", str(file), "--host", "127.0.0.1",
               "--port", str(self.port), "--log-dir", str(tmp / "copies"),
               "--log-level", "warning"]  # fmt: skip
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

    def copies(self) -> list[tuple[str, dict[str, str]]]:
        """Each copy's URL and the headers that reach it directly (the endpoint's internal key)."""
        status = httpx.get(f"{self.url}/admin/status", timeout=10).json()
        return [(f"http://127.0.0.1:{r['port']}", copy_headers(r)) for c in status["components"]
                for r in c["replicas"]]  # fmt: skip

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def bench(
    url: str, concurrency: int, requests: int, prompt_tokens: int, max_new_tokens: int,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    cfg = BenchConfig(url=url, api="openai", model="gemma", concurrency=[concurrency], requests=requests,
                      warmup=min(concurrency, 4), prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                      temperature=0.0, headers=headers or {})  # fmt: skip
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
            out[f"one_copy_x_{cpus}_threads"] = bench(ep.url, *work)
        finally:
            ep.close()
        ep = Endpoint(tmp, copies=cpus, num_cpus=1)
        try:
            out[f"{cpus}_copies_x_1_thread"] = bench(ep.url, *work)
        finally:
            ep.close()
        ep = Endpoint(tmp, copies=1, num_cpus=1)
        try:
            [(direct_url, direct_headers)] = ep.copies()
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
        "method": "one copy x 1 thread; concurrency 1, 32-token prompts, 16 new tokens, direct vs via the "
        "router; median over 3 interleaved rounds of the p50",
        "direct_e2e_ms_p50": round(med("direct", "e2e_ms_p50"), 2),
        "router_e2e_ms_p50": round(med("router", "e2e_ms_p50"), 2),
        "added_e2e_ms_p50": round(med("router", "e2e_ms_p50") - med("direct", "e2e_ms_p50"), 2),
        "direct_ttft_ms_p50": round(med("direct", "ttft_ms_p50"), 2),
        "router_ttft_ms_p50": round(med("router", "ttft_ms_p50"), 2),
        "added_ttft_ms_p50": round(med("router", "ttft_ms_p50") - med("direct", "ttft_ms_p50"), 2),
        "rounds": rounds,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
