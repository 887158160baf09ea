"""How many requests per second the `llmhost bench` load generator sustains.

A zero-delay fake server (raw asyncio, one pre-encoded OpenAI SSE answer of 16 tokens, chunked
transfer, keep-alive) runs in a child process pinned to one CPU; the load generator — the same code
`llmhost bench run` uses (closed loop, keep-alive connections, SSE parsing, per-request records) —
runs in this process pinned to another CPU. Prints one JSON object; the target is ≥ 1000 req/s.

    python benchmarks/loadgen_rate.py [--concurrency 32] [--duration 5] [--tokens 16]
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
from typing import Any


def _sse_response(tokens: int) -> bytes:
    events = []
    for i in range(tokens):
        finish = '"length"' if i == tokens - 1 else "null"
        events.append(
            f'data: {{"id":"cmpl-1","object":"text_completion","model":"fake","choices":'
            f'[{{"index":0,"text":" w{i}","finish_reason":{finish}}}]}}\n\n'.encode()
        )
    usage = f'{{"prompt_tokens":8,"completion_tokens":{tokens},"total_tokens":{tokens + 8}}}'
    events.append(f'data: {{"choices":[],"usage":{usage}}}\n\n'.encode())
    events.append(b"data: [DONE]\n\n")
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + body


NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"


class FakeProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive server answering every POST /v1/completions with the same stream."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        out = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buf[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buf) < end + 4 + length:
                break
            self.buf = self.buf[end + 4 + length :]
            out.append(self.answer if head.startswith(b"POST /v1/completions ") else NOT_FOUND)
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


def serve(port: int, tokens: int, cpu: int, ready: Any) -> None:
    os.sched_setaffinity(0, {cpu})
    answer = _sse_response(tokens)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: FakeProtocol(answer), "127.0.0.1", port, backlog=1024)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--server-cpu", type=int, default=None)
    ap.add_argument("--generator-cpu", type=int, default=None)
    args = ap.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = args.server_cpu if args.server_cpu is not None else cpus[0]
    gen_cpu = args.generator_cpu if args.generator_cpu is not None else cpus[-1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=serve, args=(port, args.tokens, server_cpu, ready), daemon=True)
    proc.start()
    try:
        if not ready.wait(30):
            raise SystemExit("fake server did not start")
        os.sched_setaffinity(0, {gen_cpu})
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
        from llmhost.bench import BenchConfig, run_benchmark

        cfg = BenchConfig(
            url=f"http://127.0.0.1:{port}",
            api="openai",
            concurrency=[args.concurrency],
            duration_s=args.duration,
            warmup=args.concurrency * 4,
            prompt_tokens=8,
            max_new_tokens=args.tokens,
            num_prompts=8,
            max_error_rate=None,
            model="fake",
        )
        cpu0, srv0, wall0 = time.process_time(), _proc_cpu_s(proc.pid), time.perf_counter()
        results = run_benchmark(cfg)
        cpu1, srv1, wall1 = time.process_time(), _proc_cpu_s(proc.pid), time.perf_counter()
        (lv,) = results.levels()
        wall = wall1 - wall0
        print(
            json.dumps(
                {
                    "benchmark": "loadgen_rate",
                    "requests_per_s": round(lv.requests_per_s, 1),
                    "successes": lv.successes,
                    "requests": lv.requests,
                    "errors": lv.errors,
                    "output_tokens_per_s": round(lv.output_tokens_per_s, 1),
                    "tokens_per_response": args.tokens,
                    "concurrency": args.concurrency,
                    "duration_s": round(lv.wall_s, 2),
                    "generator_cpu": gen_cpu,
                    "server_cpu": server_cpu,
                    "generator_cpu_utilisation": round((cpu1 - cpu0) / wall, 2),
                    "server_cpu_utilisation": round((srv1 - srv0) / wall, 2),
                    "ttft_s_p50": lv.get("ttft_s_p50"),
                    "e2e_s_p50": lv.get("e2e_s_p50"),
                    "target_requests_per_s": 1000,
                    "meets_target": lv.requests_per_s >= 1000 and lv.successes == lv.requests,
                    "cpus_online": os.cpu_count(),
                    "loadavg_1m": os.getloadavg()[0],
                }
            )
        )
    finally:
        proc.terminate()
        proc.join(5)


if __name__ == "__main__":
    main()
