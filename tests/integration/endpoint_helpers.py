"""`llmhost endpoint up` in a subprocess on 127.0.0.1, and small clients for the endpoint tests."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI
from openai.types import Batch

from tests.integration.conftest import free_port

ENGINE = "{max_input_tokens: 128, max_total_tokens: 256, max_batch_tokens: 128, max_concurrent: 4}"
STARTUP_TIMEOUT_S = 120


@dataclass
class Endpoint:
    url: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    log_dir: Path

    def status(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/admin/status", timeout=10).json())

    def replicas(self, component: str) -> list[dict[str, Any]]:
        for c in self.status()["components"]:
            if c["name"] == component:
                return list(c["replicas"])
        return []

    def run_batch(self, bodies: list[tuple[str, dict[str, Any]]]) -> tuple[Batch, list[dict[str, Any]]]:
        """A /v1/completions batch of (custom_id, body) through the openai client, waited for to its
        end: the batch and its output file's answers."""
        lines = [
            json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/completions", "body": body})
            for cid, body in bodies
        ]
        client = OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0)
        data = io.BytesIO("\n".join(lines).encode())
        file_id = client.files.create(file=("b.jsonl", data), purpose="batch").id
        batch = client.batches.create(
            input_file_id=file_id, endpoint="/v1/completions", completion_window="24h"
        )
        ended = ("completed", "failed", "expired", "cancelled")
        self.wait_for(
            "the batch done", lambda: client.batches.retrieve(batch.id).status in ended, timeout=120
        )
        done = client.batches.retrieve(batch.id)
        text = client.files.content(done.output_file_id).text if done.output_file_id else ""
        return done, [json.loads(x) for x in text.splitlines()]

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; status: {json.dumps(self.status())[:3000]}")

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "llmhost.cli", "endpoint", *args, "--port", str(self.port)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def copy_key(pid: int) -> str:
    """The endpoint's internal key a copy requires, read from the copy's environment (readable by its
    own user only, like the key itself): what a test needs to call a copy directly."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    [value] = [e.split(b"=", 1)[1] for e in environ if e.startswith(b"LLMHOST_API_KEYS=")]
    return value.decode()


def copy_headers(replica: dict[str, Any]) -> dict[str, str]:
    return {"x-api-key": copy_key(int(replica["pid"]))}


def up_command(file: Path, port: int, log_dir: Path) -> list[str]:
    return [
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
        str(log_dir),
        "--autoscale-interval",
        "0.2",
        "--drain-timeout",
        "60",
        # a copy on a machine busy with other tests (make test runs three files at once) answers its
        # health check late: 4 s x 3 misses before it is taken for hung (~13 s to detect a hung copy)
        "--health-interval",
        "0.5",
        "--health-timeout",
        "4",
        "--health-misses",
        "3",
    ]


def start_endpoint(
    tmp: Path,
    yaml_text: str,
    wait_ping: bool = True,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Endpoint:
    """`args`: more options of `endpoint up`; `env`: more environment variables of its."""
    file = tmp / "endpoint.yaml"
    file.write_text(yaml_text)
    port = free_port()
    log, log_dir = tmp / "endpoint.log", tmp / "copies"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*up_command(file, port, log_dir), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    ep = Endpoint(f"http://127.0.0.1:{port}", port, proc, log, log_dir)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"endpoint exited with {proc.returncode}:\n{log.read_text()}")
        try:
            r = httpx.get(f"{ep.url}/ping" if wait_ping else f"{ep.url}/admin/status", timeout=2)
            if r.status_code == 200:
                return ep
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    stop_endpoint(ep)
    raise RuntimeError(f"endpoint not ready within {STARTUP_TIMEOUT_S} s:\n{log.read_text()}")


def stop_endpoint(ep: Endpoint) -> None:
    if ep.process.poll() is None:
        ep.process.send_signal(signal.SIGTERM)
        try:
            ep.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            ep.process.kill()


@dataclass
class Outcome:
    status: int
    text: str
    done: bool  # a complete answer: [DONE] for streams, a JSON body otherwise
    explicit_error: bool  # an error status, or a stream that ended with an error event


async def call(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Outcome:
    """One request; streams are read to the end. A hang fails through the client's timeout."""
    if body.get("stream"):
        async with client.stream("POST", path, json=body, headers=headers) as r:
            text = (await r.aread()).decode()
        events = [e for e in text.split("\n\n") if e.strip()]
        last = events[-1] if events else ""
        return Outcome(r.status_code, text, last == "data: [DONE]", r.status_code >= 400 or '"error"' in last)
    r = await client.post(path, json=body, headers=headers)
    return Outcome(r.status_code, r.text, r.status_code == 200, r.status_code >= 400 and '"error"' in r.text)
