"""Schemathesis, led by the server's own /openapi.json, against a real `llmhost serve` (the default model,
token limits so small that every generation is a few tokens): every operation, the checks below, any
finding fails the test. Deterministic (schemathesis's deterministic generation, one worker, sequential
requests) and bounded: the coverage phase (schema boundaries, each value out of range or of the wrong
type) in negative mode only, since each such case is refused before the engine is reached; then
examples and fuzzing, positive and negative, a fixed number of cases per operation."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server

CONFIG = Path(__file__).parent / "schemathesis.toml"
CHECKS = [
    "not_a_server_error", "status_code_conformance", "content_type_conformance",
    "response_schema_conformance", "negative_data_rejection",
]  # fmt: skip
FUZZ_EXAMPLES = 12
KEY = "fuzz-key"


def schemathesis(url: str, *args: str, checks: list[str] = CHECKS) -> str:
    """One run of schemathesis's CLI; fails the test with its report if it found anything."""
    cli = Path(sys.executable).parent / "schemathesis"
    cmd = [
        str(cli), "--config-file", str(CONFIG), "--no-color", "run", f"{url}/openapi.json",
        "--checks", ",".join(checks), "--generation-deterministic", "--workers", "1",
        "--request-timeout", "120", "--suppress-health-check", "all", *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-20_000:]
    summary = re.search(r"(\d+) generated, (\d+) passed", report)
    assert summary is not None and int(summary[1]) > 0, report[-5_000:]
    # every operation of the document was tested (none skipped for want of data or auth)
    tested = re.search(r"Tested: (\d+)", report)
    selected = re.search(r"Selected: (\d+)/(\d+)", report)
    assert tested and selected and tested[1] == selected[1] == selected[2], report[-5_000:]
    print(f"schemathesis {' '.join(args)}: {summary[0]}, {tested[1]} operations")
    return report


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("openapi"), "--max-concurrent", "2", "--max-input-tokens", "16",
        "--max-total-tokens", "20", "--max-batch-tokens", "32", "--chat-template", str(CHAT_TEMPLATE),
        "--api-key", KEY,
    )  # fmt: skip
    yield srv
    stop_server(srv)


AUTH = ["-H", f"Authorization: Bearer {KEY}"]


def test_schema_boundaries_are_refused(fuzzed: Server) -> None:
    schemathesis(fuzzed.url, "--phases", "coverage", "--mode", "negative", *AUTH)


def test_generated_requests_conform(fuzzed: Server) -> None:
    schemathesis(fuzzed.url, "--phases", "examples,fuzzing", "--max-examples", str(FUZZ_EXAMPLES), *AUTH)


def test_no_operation_ignores_its_api_key(fuzzed: Server) -> None:
    schemathesis(fuzzed.url, "--phases", "fuzzing", "--max-examples", "2", *AUTH,
                 checks=["ignored_auth", "not_a_server_error"])  # fmt: skip
