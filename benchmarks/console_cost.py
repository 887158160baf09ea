"""What open consoles cost the serving path: output tokens/s of a single-host endpoint under a steady load,
with no console open and with --consoles consoles open, interleaved rounds, medians.

A console here makes exactly the page's requests (src/llmhost/console/static/console.js): every sampling
period, GET /console/api/overview and GET /console/api/series?since=<last point>, from the host the
browser would run on (this one, over HTTP). The browser's own rendering is left out: it runs on the
viewer's machine, not the endpoint's. The endpoint samples every --console-period seconds whether or not a
console is open; both sides of the comparison include that.

Also, with no load, the CPU the endpoint (router and copy) uses with 0 and with --consoles consoles open
(--idle-seconds each, twice): the consoles' own cost in cores, and as a share of the host's cores.

The endpoint: one component of the default model (unless --model), one copy with every core, started once;
the load: `llmhost bench` at --concurrency for --duration seconds per round, synthetic prompts, greedy.

Writes benchmarks/results/console_cost.json (or --out) and prints it.

    .venv/bin/python benchmarks/console_cost.py     # 10 consoles; a warm-up, then 4 rounds of 45 s a side
    .venv/bin/python benchmarks/console_cost.py --rounds 1 --duration 10 --out /tmp/console_cost.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from llmhost.bench import BenchConfig, run_benchmark
from llmhost.store import resolve_model

RESULTS = Path(__file__).parent / "results" / "console_cost.json"
STARTUP_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_endpoint(model: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="console-cost-"))
    file = tmp / "endpoint.yaml"
    cpus = len(os.sched_getaffinity(0))
    file.write_text(
        f"name: console-cost\ncomponents:\n  - name: gemma\n    model: {model}\n    copies: 1\n"
        f"    resources: {{num_cpus: {cpus}, memory_mb: 800}}\n"
        f"    engine: {{max_concurrent: {args.concurrency}}}\n"
    )
    port = free_port()
    log = tmp / "endpoint.log"
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
        "--log-dir",
        str(tmp / "copies"),
        "--console-period",
        str(args.console_period),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the endpoint exited: see {log}")
        try:
            if httpx.get(url + "/ping", timeout=2).status_code == 200:
                return proc, url, log
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"the endpoint was not ready in {STARTUP_TIMEOUT_S} s: see {log}")


async def get(client: httpx.AsyncClient, path: str) -> httpx.Response:
    """A GET, sent again once if the server closed the idle keep-alive connection as it went out: a
    browser does the same (uvicorn closes idle connections after 5 s, the console's default period)."""
    try:
        return await client.get(path)
    except (httpx.RemoteProtocolError, httpx.ReadError):
        return await client.get(path)


async def console(client: httpx.AsyncClient, stop: asyncio.Event, counts: list[int]) -> None:
    """One open page: overview and the series since its last point, every period the overview gives."""
    last_t: float | None = None
    while not stop.is_set():
        since = "" if last_t is None else f"?since={last_t}"
        overview, series = await asyncio.gather(
            get(client, "/console/api/overview"), get(client, "/console/api/series" + since)
        )
        overview.raise_for_status()
        series.raise_for_status()
        counts[0] += 2
        latest = [c["t"][-1] for c in series.json()["components"].values() if c["t"]]
        last_t = max(latest) if latest else last_t
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), overview.json()["console"]["period_s"])


class Consoles:
    """`n` consoles polling from a thread of their own while the load runs in the main one."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.n, self.requests = url, n, [0]
        self.stop_event: asyncio.Event | None = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=lambda: self.loop.run_until_complete(self.main()), daemon=True)

    async def main(self) -> None:
        self.stop_event = asyncio.Event()
        # idle connections dropped before uvicorn's 5 s keep-alive closes them under a request
        limits = httpx.Limits(keepalive_expiry=2.0)
        async with httpx.AsyncClient(base_url=self.url, timeout=30, limits=limits) as client:
            await asyncio.gather(*(console(client, self.stop_event, self.requests) for _ in range(self.n)))

    def __enter__(self) -> Consoles:
        if self.n:
            self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self.n:
            while self.stop_event is None:
                time.sleep(0.01)
            self.loop.call_soon_threadsafe(self.stop_event.set)
            self.thread.join(60)


def measure(url: str, consoles: int, args: argparse.Namespace) -> dict[str, Any]:
    cfg = BenchConfig(
        url=url,
        api="openai",
        concurrency=[args.concurrency],
        duration_s=args.duration,
        warmup=args.concurrency,
        prompt_tokens=args.prompt_tokens,
        max_new_tokens=args.max_new_tokens,
        temperature=0.0,
        name=f"consoles{consoles}",
    )
    with Consoles(url, consoles) as open_pages:
        level = run_benchmark(cfg).levels()[0]
    return {
        "output_tokens_per_s": round(level.output_tokens_per_s, 3),
        "requests": level.requests,
        "failures": level.requests - level.successes,
        "console_requests": open_pages.requests[0],
    }


def endpoint_cpu_s(pid: int) -> float:
    """CPU seconds used so far by the endpoint: its router process and every copy under it."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            cpu = proc.cpu_times()
            total += cpu.user + cpu.system
    return total


def idle_cpu(pid: int, url: str, consoles: int, seconds: float) -> dict[str, Any]:
    """The endpoint's CPU use with no load: what the consoles alone cost, in cores."""
    with Consoles(url, consoles) as open_pages:
        before, t0 = endpoint_cpu_s(pid), time.monotonic()
        time.sleep(seconds)
        used, wall = endpoint_cpu_s(pid) - before, time.monotonic() - t0
    return {"cores": round(used / wall, 5), "console_requests": open_pages.requests[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--consoles", type=int, default=10)
    ap.add_argument("--console-period", type=float, default=5.0, help="The endpoint's --console-period.")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--duration", type=float, default=45.0, help="Seconds of load per round and side.")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--idle-seconds", type=float, default=60.0, help="Each idle CPU measurement.")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    model = resolve_model(args.model)
    proc, url, _ = start_endpoint(model, args)
    runs: dict[str, list[dict[str, Any]]] = {"0": [], str(args.consoles): []}
    idle: dict[str, list[dict[str, Any]]] = {"0": [], str(args.consoles): []}
    try:
        for n in (0, args.consoles, 0, args.consoles):
            idle[str(n)].append(idle_cpu(proc.pid, url, n, args.idle_seconds))
            print(f"# idle consoles={n}: {json.dumps(idle[str(n)][-1])}", file=sys.stderr, flush=True)
        # the first minute of a fresh server is faster or slower than the rest: a round that is not counted
        print(f"# warm-up: {json.dumps(measure(url, 0, args))}", file=sys.stderr, flush=True)
        for rnd in range(args.rounds):
            for n in (0, args.consoles) if rnd % 2 == 0 else (args.consoles, 0):
                got = measure(url, n, args)
                runs[str(n)].append(got)
                print(f"# round {rnd + 1} consoles={n}: {json.dumps(got)}", file=sys.stderr, flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    med = {n: statistics.median(r["output_tokens_per_s"] for r in rs) for n, rs in runs.items()}
    cpus = len(os.sched_getaffinity(0))
    result = {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform()},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        | {"model": str(model)},
        "median_output_tokens_per_s": med,
        "cost": round(1 - med[str(args.consoles)] / med["0"], 4),
        # the consoles' own CPU, in cores, against the cores the copy serves with
        "idle_cores": {n: statistics.median(r["cores"] for r in rs) for n, rs in idle.items()},
        "runs": runs,
        "idle": idle,
        "console_cpu_share": round(
            (
                statistics.median(r["cores"] for r in idle[str(args.consoles)])
                - statistics.median(r["cores"] for r in idle["0"])
            )
            / cpus,
            5,
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
