"""What tracing costs the request path: requests/s and median latency of short requests to `llmhost serve`
with no OTLP endpoint (tracing off), with --otlp-traces-endpoint (on: every request a span, exported to a
receiver in this process), and, with --before REF, of the build at git REF (a worktree of it, no tracing
code at all). Interleaved rounds, medians.

Short requests on purpose (a one-token completion of a short prompt): a span's cost is per request, so
the shortest request shows it largest. The three servers run side by side, one core each unless
--threads, and are loaded one at a time, round by round (off, on, before, off, on, ...).

Writes benchmarks/results/tracing_cost.json (or --out) and prints it.

    .venv/bin/python benchmarks/tracing_cost.py --before HEAD~1       # 5 rounds of 20 s a side
    .venv/bin/python benchmarks/tracing_cost.py --rounds 1 --duration 5 --out /tmp/tracing_cost.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "tracing_cost.json"
STARTUP_TIMEOUT_S = 180
EXPORT_WAIT_S = 6.0  # past the batch processor's schedule (the SDK's default: 5 s)


class SpanCounter:
    """An OTLP/HTTP traces receiver that counts the spans it is sent."""

    def __init__(self) -> None:
        self.spans = 0
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers.get("content-length", 0))))
                counter.spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(src: Path, args: argparse.Namespace, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """`llmhost serve` of the default model from the sources in `src`."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        str(args.threads),
        "--max-concurrent",
        str(args.concurrency),
        "--log-level",
        "warning",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)  # "off" is off
    log = Path(tempfile.mkstemp(prefix="tracing-cost-", suffix=".log")[1])
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: see {log}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/ping", timeout=2).status_code == 200:
                return proc, url
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"the server was not ready in {STARTUP_TIMEOUT_S} s: see {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextlib.contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """The sources of git `ref`, checked out apart."""
    where = Path(tempfile.mkdtemp(prefix="tracing-cost-before-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref], check=True)
    try:
        yield where / "src"
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)


async def load(url: str, args: argparse.Namespace) -> dict[str, float]:
    """--concurrency clients sending one-token completions for --duration seconds."""
    latencies: list[float] = []
    failures = 0
    body = {"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0}
    deadline = time.monotonic() + args.duration

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal failures
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            r = await c.post("/v1/completions", json=body)
            if r.status_code == 200:
                latencies.append(time.perf_counter() - t0)
            else:
                failures += 1

    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        await asyncio.gather(*(client(c) for _ in range(args.concurrency)))
    return {
        "requests_per_s": round(len(latencies) / args.duration, 3),
        "latency_p50_ms": round(1000 * statistics.median(latencies), 3) if latencies else 0.0,
        "answered": len(latencies),
        "failures": failures,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default=None, help="git ref of a build to compare with (no tracing code)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load per round and side")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="each server's engine threads")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    receiver = SpanCounter()
    src = ROOT / "src"
    with contextlib.ExitStack() as stack:
        servers = {
            "off": start_server(src, args),
            "on": start_server(src, args, "--otlp-traces-endpoint", receiver.url),
        }
        if args.before:
            servers["before"] = start_server(stack.enter_context(worktree(args.before)), args)
        for proc, _ in servers.values():
            stack.callback(stop, proc)
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
        warm_up = argparse.Namespace(**{**vars(args), "duration": 2.0})
        warm = {name: asyncio.run(load(url, warm_up)) for name, (_, url) in servers.items()}  # not counted
        for i in range(args.rounds):
            for name, (_, url) in servers.items():
                rounds[name].append(asyncio.run(load(url, args)))
                print(f"round {i + 1} {name}: {rounds[name][-1]}", file=sys.stderr)
        time.sleep(EXPORT_WAIT_S)  # the last batch of spans
        traced = warm["on"]["answered"] + sum(r["answered"] for r in rounds["on"])

    def median(name: str, key: str) -> float:
        return round(statistics.median(r[key] for r in rounds[name]), 3)

    result = {
        "what": "llmhost serve, one-token completions: tracing off, on (OTLP to a local receiver), before",
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {k: str(v) for k, v in vars(args).items()},
        "median": {
            name: {key: median(name, key) for key in ("requests_per_s", "latency_p50_ms")} for name in servers
        },
        # tracing was on: a span for every request "on" answered, its warm-up's included
        "spans_received": receiver.spans,
        "requests_answered_on": traced,
        "rounds": rounds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
