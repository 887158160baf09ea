"""A real S3-compatible server (moto's standalone server) on 127.0.0.1 for the s3:// tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

FAKE_CREDS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class S3Server:
    url: str

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


@contextmanager
def moto_server() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()


def point_env_at(monkeypatch: pytest.MonkeyPatch, server: S3Server) -> None:
    """Credentials and endpoint through the environment, as `llmhost serve` gets them."""
    for name, value in FAKE_CREDS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    monkeypatch.delenv("LLMHOST_S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def fake_credentials(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """Credentials through the environment and no endpoint there (the test names it another way), with
    a fresh llmhost cache."""
    for name, value in FAKE_CREDS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "LLMHOST_S3_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LLMHOST_CACHE", str(cache))


@contextmanager
def moto_subprocess(unauthenticated_actions: int) -> Iterator[S3Server]:
    """A moto server in its own process that checks credentials after its first N actions.

    moto reads INITIAL_NO_AUTH_ACTION_COUNT once, at import: the in-process server cannot change it.
    """
    import os
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(unauthenticated_actions)}
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            # a TCP connect, not an HTTP probe: a request would use up one of the unauthenticated actions
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
