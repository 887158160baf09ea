"""Schemathesis, led by a server's own /openapi.json, as the OpenAPI fuzz tests run it
(test_openapi_fuzz.py against `llmhost serve`, test_openapi_fuzz_router.py against an endpoint router):
deterministic generation, one worker, sequential requests, any finding fails the test. Schemathesis runs
in a temporary directory: its cache (.schemathesis/) never lands in the checkout."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CONFIG = Path(__file__).parent / "schemathesis.toml"
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
]
KEY = "fuzz-key"
AUTH = ["-H", f"Authorization: Bearer {KEY}"]


def schemathesis(url: str, cwd: Path, *args: str, checks: list[str] = CHECKS) -> str:
    """One run of schemathesis's CLI in `cwd`; fails the test with its report if it found anything."""
    cli = Path(sys.executable).parent / "schemathesis"
    cmd = [
        str(cli),
        "--config-file",
        str(CONFIG),
        "--no-color",
        "run",
        f"{url}/openapi.json",
        "--checks",
        ",".join(checks),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "120",
        "--suppress-health-check",
        "all",
        *args,
    ]
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
