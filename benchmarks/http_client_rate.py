"""Streamed requests per second, and client CPU per request, of three asyncio HTTP clients.

The question it answers: does the load generator's HTTP layer reach its target of ≥ 1,000 streamed
requests/s? It answered the choice of that layer: aiohttp reached the target (4,519 req/s) where
httpx did not (207), so `llmhost bench` moved from a hand-written HTTP/1.1 client (6,078 req/s) to
aiohttp, through src/llmhost/bench/load/http.py.

The zero-delay fake server of benchmarks/loadgen_rate.py (one pre-encoded OpenAI SSE answer of
`--tokens` token events, chunked transfer, keep-alive) runs in a child process pinned to one CPU; each
client runs in this process pinned to another CPU, `--concurrency` workers each sending POST
/v1/completions in a closed loop on keep-alive connections for `--duration` seconds (after a warm-up),
and doing the same work per request: read the body chunk by chunk as it arrives, time each chunk,
split it into SSE events (llmhost.bench.load.sse) and parse every event's JSON. Only the HTTP layer differs:

- llmhost: llmhost.bench.load.http (what the load generator uses: aiohttp with a prepared request)
- aiohttp: aiohttp.ClientSession, TCPConnector(limit=concurrency), resp.content.iter_any()
- httpx:   httpx.AsyncClient, Limits(max_connections=concurrency), client.stream(...).aiter_raw()

Prints one JSON object per client and writes them all to benchmarks/results/http_client_rate.json.

    python benchmarks/http_client_rate.py [--clients llmhost,aiohttp,httpx] [--concurrency 64]
        [--duration 5] [--tokens 16] [--out benchmarks/results/http_client_rate.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # loadgen_rate: the fake server
sys.path.insert(0, str(HERE.parent / "src"))

from loadgen_rate import _proc_cpu_s, serve  # noqa: E402

from llmhost.bench.load.sse import SSEDecoder  # noqa: E402

TARGET_RPS = 1000
BODY = json.dumps({"model": "fake", "prompt": "hello " * 8, "max_tokens": 16, "stream": True}).encode()
Sender = Callable[[], Awaitable[int]]  # one request; returns the number of token events read


class Consumer:
    """The per-request work every client does on the body: time chunks, split SSE, parse JSON."""

    def __init__(self) -> None:
        self.decoder = SSEDecoder()
        self.events = 0
        self.last_chunk_s = 0.0

    def feed(self, chunk: bytes) -> None:
        self.last_chunk_s = time.perf_counter()
        for payload in self.decoder.feed(chunk):
            if payload != b"[DONE]" and json.loads(payload).get("choices"):
                self.events += 1

    @classmethod
    async def count(cls, chunks: AsyncIterator[bytes]) -> int:
        """The token events of a whole body, read chunk by chunk as the client hands them over."""
        c = cls()
        async for chunk in chunks:
            c.feed(chunk)
        return c.events


async def llmhost_client(url: str, concurrency: int) -> tuple[Callable[[], Sender], Callable[[], Any]]:
    from llmhost.bench.load.http import Endpoint, HttpClientError, new_session, prepare, send

    req = prepare(Endpoint.parse(url), "POST", "/v1/completions", BODY)
    session = new_session(concurrency)

    def make() -> Sender:
        async def one() -> int:
            async with send(session, req) as resp:
                if resp.status != 200:
                    raise HttpClientError("status", str(resp.status))
                return await Consumer.count(resp.content.iter_any())

        return one

    return make, session.close


async def aiohttp_client(url: str, concurrency: int) -> tuple[Callable[[], Sender], Callable[[], Any]]:
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency), timeout=aiohttp.ClientTimeout(total=30)
    )
    headers = {"Content-Type": "application/json"}

    def make() -> Sender:
        async def send() -> int:
            async with session.post(f"{url}/v1/completions", data=BODY, headers=headers) as resp:
                resp.raise_for_status()
                return await Consumer.count(resp.content.iter_any())

        return send

    return make, session.close


async def httpx_client(url: str, concurrency: int) -> tuple[Callable[[], Sender], Callable[[], Any]]:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    client = httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0)
    headers = {"Content-Type": "application/json"}

    def make() -> Sender:
        async def send() -> int:
            async with client.stream("POST", "/v1/completions", content=BODY, headers=headers) as resp:
                resp.raise_for_status()
                return await Consumer.count(resp.aiter_raw())

        return send

    return make, client.aclose


CLIENTS = {"llmhost": llmhost_client, "aiohttp": aiohttp_client, "httpx": httpx_client}


async def closed_loop(senders: list[Sender], seconds: float, tokens: int) -> tuple[int, int]:
    """Each worker sends back to back for ``seconds``; returns (complete streams, failures)."""
    done = [0, 0]
    stop = time.perf_counter() + seconds

    async def worker(send: Sender) -> None:
        while time.perf_counter() < stop:
            try:
                ok = await send() == tokens
            except Exception:  # counted, not fatal: a failing client shows as failures
                ok = False
            done[0 if ok else 1] += 1

    await asyncio.gather(*(worker(s) for s in senders))
    return done[0], done[1]


async def measure(name: str, url: str, args: argparse.Namespace, server_pid: int) -> dict[str, Any]:
    make, close = await CLIENTS[name](url, args.concurrency)
    senders = [make() for _ in range(args.concurrency)]
    await closed_loop(senders, args.warmup, args.tokens)  # connections open, caches warm
    cpu0, srv0, wall0 = time.process_time(), _proc_cpu_s(server_pid), time.perf_counter()
    ok, failed = await closed_loop(senders, args.duration, args.tokens)
    cpu1, srv1, wall1 = time.process_time(), _proc_cpu_s(server_pid), time.perf_counter()
    await close()
    wall = wall1 - wall0
    rps = ok / wall
    return {
        "client": name,
        "requests_per_s": round(rps, 1),
        "complete_streams": ok,
        "failures": failed,
        "client_cpu_us_per_request": round(1e6 * (cpu1 - cpu0) / max(ok, 1), 1),
        "client_cpu_utilisation": round((cpu1 - cpu0) / wall, 2),
        "server_cpu_utilisation": round((srv1 - srv0) / wall, 2),
        "meets_target": rps >= TARGET_RPS and failed == 0,
        "duration_s": round(wall, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }


def start_server(tokens: int, cpu: int) -> tuple[Any, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=serve, args=(port, tokens, cpu, ready), daemon=True)
    proc.start()
    if not ready.wait(30):
        proc.terminate()
        raise SystemExit("fake server did not start")
    return proc, port


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="llmhost,aiohttp,httpx")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--server-cpu", type=int, default=None)
    ap.add_argument("--client-cpu", type=int, default=None)
    ap.add_argument("--out", default=str(HERE / "results" / "http_client_rate.json"))
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = args.server_cpu if args.server_cpu is not None else cpus[0]
    client_cpu = args.client_cpu if args.client_cpu is not None else cpus[-1]
    loadavg_before = round(os.getloadavg()[0], 2)
    rows = []
    for name in args.clients.split(","):
        proc, port = start_server(args.tokens, server_cpu)  # a fresh server: no state carried over
        try:
            os.sched_setaffinity(0, {client_cpu})
            row = asyncio.run(measure(name, f"http://127.0.0.1:{port}", args, proc.pid))
        finally:
            proc.terminate()
            proc.join(5)
        print(json.dumps(row), flush=True)
        rows.append(row)
    doc = {
        "benchmark": "http_client_rate",
        "target_requests_per_s": TARGET_RPS,
        "tokens_per_response": args.tokens,
        "concurrency": args.concurrency,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "cpus_online": os.cpu_count(),
        "loadavg_1m_before": loadavg_before,
        "python": sys.version.split()[0],
        "versions": _versions(),
        "results": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("aiohttp", "httpx"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


if __name__ == "__main__":
    main()
