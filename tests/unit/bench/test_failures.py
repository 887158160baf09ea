"""Failures are counted by kind and never crash a run; an interrupted run writes what it measured."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from llmhost.bench import BenchConfig, arun_benchmark, load_results, run_benchmark
from llmhost.bench.load.http import Endpoint, new_session, prepare, read_body, send
from tests.unit.bench.helpers import free_port


def _run(url: str, mode: str | None = None, **kw: object) -> dict[str, int]:
    headers = {"X-Fake-TTFT": "0.005", "X-Fake-ITL": "0.002"}
    if mode:
        headers["X-Fake-Mode"] = mode
    args: dict[str, object] = {"requests": 3, "max_error_rate": None, "max_new_tokens": 4, "prompt_tokens": 8}
    args.update(kw)
    cfg = BenchConfig(url=url, api=str(args.pop("api", "openai")), headers=headers, **args)  # type: ignore[arg-type]
    results = run_benchmark(cfg)
    (lv,) = results.levels()
    assert lv.successes == 0
    return lv.errors


def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert _run(url, concurrency=[2], requests=4) == {"connection_refused": 4}


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        ("429", "http_429"),
        ("500", "http_5xx"),
        ("400", "http_4xx"),
        ("malformed", "malformed_stream"),
        ("truncated", "malformed_stream"),
        ("error_event", "stream_error"),
    ],
)
@pytest.mark.parametrize("api", ["openai", "tgi"])
def test_error_kinds(fake_url: str, mode: str, kind: str, api: str) -> None:
    assert _run(fake_url, mode, api=api) == {kind: 3}


def test_timeout(fake_url: str) -> None:
    t0 = time.perf_counter()
    assert _run(fake_url, "hang", concurrency=[2], requests=2, timeout_s=0.3) == {"timeout": 2}
    assert time.perf_counter() - t0 < 10


def test_errors_then_success_on_the_same_connection(fake_url: str) -> None:
    # a 429 answer keeps the keep-alive connection usable: the next level succeeds
    cfg = BenchConfig(
        url=fake_url,
        concurrency=[1],
        requests=2,
        max_new_tokens=3,
        prompt_tokens=4,
        headers={"X-Fake-TTFT": "0.001", "X-Fake-ITL": "0.001"},
    )
    (lv,) = run_benchmark(cfg).levels()
    assert lv.successes == 2


def test_error_rate_bound_stops_the_run(fake_url: str) -> None:
    cfg = BenchConfig(
        url=fake_url,
        concurrency=[1, 2],
        requests=200,
        max_error_rate=0.5,
        prompt_tokens=4,
        headers={"X-Fake-Mode": "500"},
    )
    results = run_benchmark(cfg)
    (lv,) = results.levels()  # the second level never ran
    assert lv.stopped == "error_rate"
    assert 10 <= lv.requests < 20
    assert lv.errors == {"http_5xx": lv.requests}


async def test_cancelled_run_writes_what_it_measured(fake_url: str, tmp_path: Path) -> None:
    cfg = BenchConfig(
        url=fake_url,
        concurrency=[2, 4],
        duration_s=30,
        prompt_tokens=8,
        max_new_tokens=5,
        headers={"X-Fake-TTFT": "0.01", "X-Fake-ITL": "0.01"},
    )
    task = asyncio.create_task(arun_benchmark(cfg, tmp_path))
    await asyncio.sleep(1.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    results = load_results(tmp_path)
    assert results.interrupted
    (lv,) = results.levels()
    assert lv.stopped == "interrupted" and lv.successes > 5
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert len(lines) >= lv.requests
    assert (tmp_path / "report.html").exists() and (tmp_path / "summary.csv").exists()


def test_ctrl_c_on_the_cli_writes_results(fake_url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = "import sys; from llmhost.bench.cli import app; sys.exit(app())"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "run",
            "--url",
            fake_url,
            "--concurrency",
            "2",
            "--duration",
            "30",
            "--prompt-tokens",
            "8",
            "--max-new-tokens",
            "5",
            "--header",
            "X-Fake-TTFT: 0.01",
            "--header",
            "X-Fake-ITL: 0.01",
            "--out",
            str(out),
            "--no-live",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # as a non-interactive shell starts a background job: SIGINT ignored, which Python keeps ignored;
        # the command installs its own handler, so Ctrl-C (or a supervisor's SIGINT) still stops it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until requests are being measured
        p = out / "requests.jsonl"
        if p.exists() and p.stat().st_size > 2000:
            break
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGINT)
    stdout, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, stdout.decode()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    level = summary["configs"][0]["levels"][0]
    assert level["successes"] > 0 and level["stopped"] == "interrupted"
    assert b"Interrupted" in stdout


async def test_server_closing_idle_keep_alive_connections_is_not_an_error() -> None:
    events = [
        b'data: {"choices":[{"text":" a"}]}\n\n',
        b'data: {"choices":[{"text":" b"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + body
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(answer)  # then close, without saying so: the client must reconnect quietly
        await writer.drain()
        writer.close()
        served += 1

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        cfg = BenchConfig(
            url=f"http://127.0.0.1:{port}",
            concurrency=[2],
            requests=6,
            tokenize=False,
            model="m",
            max_error_rate=None,
        )
        results = await arun_benchmark(cfg)
    (lv,) = results.levels()
    assert lv.successes == 6, lv.errors
    assert lv.output_tokens == 12 and served == 6


# one streamed completion: a text event, then [DONE], chunked
EVENTS = [b'data: {"choices":[{"text":" a"}]}\n\n', b"data: [DONE]\n\n"]
CHUNKED = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"


class OneAnswerAConnection:
    """A server each of whose connections answers its first request only and drops the next one
    unanswered (a server's keep-alive timeout firing as the request arrives, as seen with
    llama-server); counts connections, answers and dropped requests."""

    answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + CHUNKED

    def __init__(self) -> None:
        self.connections = self.answered = self.dropped = 0

    @staticmethod
    async def read_request(reader: asyncio.StreamReader) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]))

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self.read_request(reader)
        writer.write(self.answer)
        await writer.drain()
        self.answered += 1
        try:
            await self.read_request(reader)
            self.dropped += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed it first
        writer.close()


async def test_a_request_raced_by_a_keep_alive_close_is_sent_again_on_a_new_connection() -> None:
    # the client must send a dropped request again on a new connection, once, and count no error
    stand_in = OneAnswerAConnection()
    server = await asyncio.start_server(stand_in.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        cfg = BenchConfig(
            url=f"http://127.0.0.1:{port}",
            concurrency=[1],
            requests=5,
            tokenize=False,
            model="m",
            max_error_rate=None,
            warmup=1,
        )
        results = await arun_benchmark(cfg)
    (lv,) = results.levels()
    assert lv.successes == 5, lv.errors
    # the dropped ones were answered on new connections
    assert stand_in.answered == 6 and stand_in.dropped >= 1


async def test_a_request_is_sent_again_past_every_closed_connection_in_the_pool() -> None:
    # three connections each answer one request, all at once, and then drop the next one: the pool
    # holds three closed connections, and a request must go past all of them to a new one
    stand_in = OneAnswerAConnection()

    async def complete(session: aiohttp.ClientSession, url: str) -> bytes:
        async with send(session, prepare(Endpoint.parse(url), "POST", "/v1/completions", b"{}")) as resp:
            return await read_body(resp)

    server = await asyncio.start_server(stand_in.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server, new_session(3) as session:
        await asyncio.gather(*(complete(session, url) for _ in range(3)))
        assert await complete(session, url) == b"".join(EVENTS)
    assert stand_in.dropped == 3 and stand_in.connections == 4
