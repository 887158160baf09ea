"""A real `llmhost serve` of the default model on 127.0.0.1, started once per module."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.tinymodels import build_tiny_gguf, smollm2_gguf

FIXTURES = Path(__file__).parent.parent / "fixtures"
CHAT_TEMPLATE = FIXTURES / "gemma_chat.jinja"


# SmolLM2 135M Instruct: a Llama model with its own chat template
SMOLLM2 = smollm2_gguf()
STARTUP_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    # the /ping statuses answered while it started (503 while the model loaded), before the first 200
    startup_pings: list[int] = field(default_factory=list)

    def client(self, timeout: float = 120) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def metric(self, name: str) -> float:
        """Sum of the samples of one metric in /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def bucket(self, name: str, le: str) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith(f'{name}_bucket{{le="{le}"}}'):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(f"{name} bucket {le}")


def start_server(tmp: Path, *args: str, env: dict[str, str] | None = None) -> Server:
    """`env`: more environment variables of the server's."""
    port = free_port()
    log = tmp / f"serve-{port}.log"
    # one engine thread: ggml's spinning thread barrier collapses when the test process and the
    # server share two cores; speed is measured in benchmarks/, not here
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
        "1",
        *args,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    pings: list[int] = []
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            status = httpx.get(f"{url}/ping", timeout=2).status_code
            if status == 200:
                return Server(url, proc, log, pings)
            pings.append(status)
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server did not pass /ping within {STARTUP_TIMEOUT_S} s:\n{log.read_text()}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("serve"),
        "--max-concurrent",
        "8",
        "--max-input-tokens",
        "1536",
        "--max-total-tokens",
        "2048",
        "--max-batch-tokens",
        "512",
        "--chat-template",
        str(CHAT_TEMPLATE),
        "--served-model-name",
        "gemma-test",
    )
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Tight limits: one sequence, one queue place, short contexts; no embeddings (--no-chat-embeddings)."""
    srv = start_server(
        tmp_path_factory.mktemp("small"),
        "--no-chat-embeddings",
        "--max-concurrent",
        "1",
        "--max-queue",
        "1",
        "--max-input-tokens",
        "32",
        "--max-total-tokens",
        "64",
        "--max-batch-tokens",
        "32",
    )
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama (8 MB, SmolLM2's vocabulary, tests/tinymodels.py), for the tests of an
    endpoint's plumbing rather than of a model's text: measured on this project's 2-core host, a copy of
    it starts in ~1.0 CPU-s and computes a token in ~1 ms, where the default Gemma 3 270M takes ~1.6 CPU-s
    and ~21 ms (its 262k-token vocabulary). Its greedy answers are noise, but the same noise on every
    copy computing one sequence at a time."""
    return build_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf")
