"""Fixtures of the bench tests: fake streaming servers on 127.0.0.1 in subprocesses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.bench.helpers import fake_server


@pytest.fixture(scope="session")
def fake_url() -> Iterator[str]:
    """A fake server: TTFT 50 ms, 20 ms between tokens (override per request with X-Fake-* headers)."""
    with fake_server("--ttft", "0.05", "--itl", "0.02") as url:
        yield url


@pytest.fixture(scope="session")
def fake_url_no_tokenizer() -> Iterator[str]:
    with fake_server("--ttft", "0.01", "--itl", "0.002", "--no-tokenizer") as url:
        yield url


@pytest.fixture(scope="session")
def fake_url_metrics() -> Iterator[str]:
    """A fake server exposing /metrics with llmhost's names (see fake_server.py)."""
    with fake_server("--ttft", "0.05", "--itl", "0.01", "--metrics") as url:
        yield url


@pytest.fixture(scope="session")
def fake_url_serial() -> Iterator[str]:
    """A fake server that streams one answer at a time (others wait): it saturates at concurrency 1."""
    with fake_server("--ttft", "0.05", "--itl", "0.02", "--max-concurrent", "1") as url:
        yield url
