"""Schemathesis, led by the server's own /openapi.json, against a real `llmhost serve` of the tiny model
(`tiny_model`: what is under test is the API, not the model's text) with token limits so small that every
generation is a few tokens and API keys on: every operation, the checks of
schemathesis_helpers.py, any finding fails the test. Deterministic (schemathesis's deterministic
generation, one worker, sequential requests) and bounded: the coverage phase (schema boundaries, each value
out of range or of the wrong type) in negative mode only, since each such case is refused before the
engine is reached; then examples and fuzzing, positive and negative, a fixed number of cases per
operation. The endpoint router's runs are test_openapi_fuzz_router.py (a file of their own, so that
pytest-xdist runs the two halves on two workers at once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server
from tests.integration.schemathesis_helpers import AUTH, CHECKS, KEY, schemathesis

FUZZ_EXAMPLES = 6


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("openapi"),
        str(tiny_model),
        "--max-concurrent",
        "2",
        "--max-input-tokens",
        "16",
        "--max-total-tokens",
        "20",
        "--max-batch-tokens",
        "32",
        "--chat-template",
        str(CHAT_TEMPLATE),
        "--api-key",
        KEY,
    )
    yield srv
    stop_server(srv)


def test_schema_boundaries_are_refused(fuzzed: Server, tmp_path: Path) -> None:
    schemathesis(fuzzed.url, tmp_path, "--phases", "coverage", "--mode", "negative", *AUTH)


def test_generated_requests_conform(fuzzed: Server, tmp_path: Path) -> None:
    """With ignored_auth: each operation's first success is sent again without a key and with a wrong one
    (once per operation and run), which must be refused."""
    schemathesis(
        fuzzed.url,
        tmp_path,
        "--phases",
        "examples,fuzzing",
        "--max-examples",
        str(FUZZ_EXAMPLES),
        *AUTH,
        checks=[*CHECKS, "ignored_auth"],
    )
