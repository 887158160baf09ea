"""A server a sweep (or a recipe's benchmark) starts for one configuration, and the endpoint file it
starts one of several copies from."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import yaml

from llmhost.bench.load.http import HttpClientError, simple_request
from llmhost.process.children import die_with_parent

HOST = "127.0.0.1"


def llmhost_command() -> list[str]:
    """How to run this installation's ``llmhost`` CLI."""
    script = Path(sys.executable).parent / "llmhost"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from llmhost.cli import main; main()"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A server started for one configuration, in its own process group."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.argv = argv
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    async def wait_ready(self, url: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(f"server exited with code {code} before it was ready:\n{self.log_tail()}")
            try:
                status, _ = await simple_request(url, "GET", None, 2.0)
                if status == 200:
                    return
            except (TimeoutError, HttpClientError, OSError):
                pass  # not listening, or not answering, yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready within {timeout_s:g} s:\n{self.log_tail()}")
            await asyncio.sleep(0.25)

    async def wait_all_copies(self, base_url: str, timeout_s: float) -> None:
        """An endpoint answers /ping once one copy of each component is ready; a measurement of
        several copies waits for all of them (``/v1/models``: ``ready`` = ``copies``)."""
        deadline = time.monotonic() + timeout_s
        seen = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"endpoint exited with code {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(Exception):
                status, body = await simple_request(f"{base_url}/v1/models", "GET", None, 2.0)
                models = json.loads(body).get("data", []) if status == 200 else []
                seen = ", ".join(f"{m['id']} {m.get('ready')}/{m.get('copies')}" for m in models)
                if models and all(m.get("ready") == m.get("copies") for m in models):
                    return
            await asyncio.sleep(0.25)
        raise RuntimeError(f"not every copy was ready within {timeout_s:g} s ({seen}):\n{self.log_tail()}")

    def stop(self, grace_s: float = 15.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


# memory reserved per copy of a swept endpoint (the default model's copy uses about 600 MB)
ENDPOINT_COPY_MEMORY_MB = 1024


def endpoint_file(
    name: str,
    model: str,
    copies: int,
    engine: dict[str, Any],
    threads: int | None = None,
    router_cpus: int = 0,
    adapters: list[dict[str, Any]] | None = None,
) -> Path:
    """An endpoint file with one component of `copies` fixed copies, `threads` CPUs each (None: the CPUs
    left after the router's, shared), these `engine:` settings and `adapters:` (LoRA adapters every copy
    loads), and `router_cpus` CPUs kept for its router."""
    if threads is None:
        threads = max(1, (len(os.sched_getaffinity(0)) - router_cpus) // copies)
    doc: dict[str, Any] = {
        "name": re.sub(r"[^a-z0-9-]", "-", name.lower()),
        "components": [
            {
                "name": "model",
                "model": model,
                "copies": copies,
                "resources": {"num_cpus": threads, "memory_mb": ENDPOINT_COPY_MEMORY_MB},
                "engine": engine,
                **({"adapters": adapters} if adapters else {}),
            }
        ],
    }
    if router_cpus:
        doc["router"] = {"num_cpus": router_cpus}
    path = Path(tempfile.mkdtemp(prefix="llmhost-sweep-")) / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
