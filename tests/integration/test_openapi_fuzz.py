"""Schemathesis, led by the server's own /openapi.json, against a real `llmhost serve` and a real endpoint
router (`llmhost endpoint up`, one component of the default model), both with token limits so small that
every generation is a few tokens and API keys on: every operation, the checks below, any finding fails
the test. Deterministic (schemathesis's deterministic generation, one worker, sequential requests) and
bounded: the coverage phase (schema boundaries, each value out of range or of the wrong type) in
negative mode only, since each such case is refused before the engine is reached; then examples and
fuzzing, positive and negative, a fixed number of cases per operation. Schemathesis runs in a temporary
directory: its cache (.schemathesis/) never lands in the checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server
from tests.integration.endpoint_helpers import Endpoint, start_endpoint, stop_endpoint

CONFIG = Path(__file__).parent / "schemathesis.toml"
CHECKS = [
    "not_a_server_error", "status_code_conformance", "content_type_conformance",
    "response_schema_conformance", "negative_data_rejection",
]  # fmt: skip
FUZZ_EXAMPLES = 6
KEY = "fuzz-key"


def schemathesis(url: str, cwd: Path, *args: str, checks: list[str] = CHECKS) -> str:
    """One run of schemathesis's CLI in `cwd`; fails the test with its report if it found anything."""
    cli = Path(sys.executable).parent / "schemathesis"
    cmd = [
        str(cli), "--config-file", str(CONFIG), "--no-color", "run", f"{url}/openapi.json",
        "--checks", ",".join(checks), "--generation-deterministic", "--workers", "1",
        "--request-timeout", "120", "--suppress-health-check", "all", *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-20_000:]
    summary = re.search(r"(\d+) generated, (\d+) passed", report)
    assert summary is not None and int(summary[1]) > 0, report[-5_000:]
    # every operation of the document was tested (none skipped for want of data or auth)
    tested = re.search(r"Tested: (\d+)", report)
    selected = re.search(r"Selected: (\d+)/(\d+)", report)
    assert tested and selected and tested[1] == selected[1], report[-5_000:]
    filtered = any(a.startswith(("--include", "--exclude")) for a in args)
    assert filtered or selected[1] == selected[2], report[-5_000:]
    took = re.findall(r"=+ .* in ([\d.]+)s =+", report)
    print(f"schemathesis {' '.join(args)}: {summary[0]}, {tested[1]} operations, {took[-1:]} s")
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


def test_schema_boundaries_are_refused(fuzzed: Server, tmp_path: Path) -> None:
    schemathesis(fuzzed.url, tmp_path, "--phases", "coverage", "--mode", "negative", *AUTH)


def test_generated_requests_conform(fuzzed: Server, tmp_path: Path) -> None:
    """With ignored_auth: each operation's first success is sent again without a key and with a wrong one
    (once per operation and run), which must be refused."""
    schemathesis(fuzzed.url, tmp_path, "--phases", "examples,fuzzing", "--max-examples", str(FUZZ_EXAMPLES),
                 *AUTH, checks=[*CHECKS, "ignored_auth"])  # fmt: skip


# -- the endpoint router ---------------------------------------------------------------------------------
# One copy holding a CPU whole and the router every other CPU: no further copy fits, so a generated
# component or scale-up the admin API accepts is refused for capacity (409) instead of starting copies.
# The copy's limits as `llmhost serve`'s above.
def endpoint_file() -> str:
    cpus = len(os.sched_getaffinity(0))
    return f"""
name: fuzz
router: {{num_cpus: {cpus - 1}}}
components:
  - name: only
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {{max_input_tokens: 16, max_total_tokens: 20, max_batch_tokens: 32, max_concurrent: 2,
              chat_template: {CHAT_TEMPLATE}}}
    startup_health_check_timeout_s: 120
"""


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    # the helpers' quick hang detection (1 s) is for the fault tests; here a copy starved of CPU on a busy
    # machine must not be taken for hung and killed under a request (a 502 that is no finding)
    health = ("--health-interval", "1", "--health-timeout", "15", "--health-misses", "3")
    ep = start_endpoint(tmp_path_factory.mktemp("openapi-endpoint"), endpoint_file(),
                        args=("--api-key", KEY, *health))  # fmt: skip
    yield ep
    stop_endpoint(ep)


# The relayed operations are the copies' own (the same models, the same answers) and the serve's coverage
# run above walks their schema boundaries; here fuzzing, positive and negative, checks what the router
# adds: routing, relaying answers and streams unchanged, its own refusals. The coverage phase walks the
# router's own operations. The admin operations that change the endpoint run last, /admin/down (which
# stops it) alone at the end: a component they added would make every request naming none a 400.
CHANGES = "^/admin/(scale|components|down)"
OWN = "^/(ping|health|metrics|v1/models|admin/(status|scale|components)|console/api/)"
ROUTER_FUZZ_EXAMPLES = 2


def test_router_generated_requests_conform(endpoint: Endpoint, tmp_path: Path) -> None:
    schemathesis(endpoint.url, tmp_path, "--phases", "examples,fuzzing", "--max-examples",
                 str(ROUTER_FUZZ_EXAMPLES), *AUTH, "--exclude-path-regex", CHANGES,
                 checks=[*CHECKS, "ignored_auth"])  # fmt: skip


def test_router_schema_boundaries_are_refused(endpoint: Endpoint, tmp_path: Path) -> None:
    schemathesis(endpoint.url, tmp_path, "--phases", "coverage", "--mode", "negative", *AUTH,
                 "--include-path-regex", OWN)  # fmt: skip


def test_router_admin_changes_conform(endpoint: Endpoint, tmp_path: Path) -> None:
    schemathesis(endpoint.url, tmp_path, "--phases", "examples,fuzzing", "--max-examples",
                 str(ROUTER_FUZZ_EXAMPLES), *AUTH, "--include-path-regex", "^/admin/(scale|components)",
                 checks=[*CHECKS, "ignored_auth"])  # fmt: skip


def test_router_admin_down_conforms(endpoint: Endpoint, tmp_path: Path) -> None:
    """Last: the endpoint stops (no ignored_auth: its probe would come after, to a draining endpoint's 503;
    tests/unit/endpoint/test_openapi.py checks the key)."""
    schemathesis(endpoint.url, tmp_path, "--phases", "fuzzing", "--max-examples", "1", *AUTH,
                 "--include-path-regex", "^/admin/down$")  # fmt: skip
    endpoint.process.wait(timeout=60)
