"""`--cpu-top`: a test's CPU counts the processes it starts, a test that only waits costs nearly nothing,
and the workers' figures reach the report under pytest-xdist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]

SUITE = """
import subprocess, sys, time

BURN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"

def test_burns_in_a_child():
    subprocess.run([sys.executable, "-c", BURN], check=True)

def test_waits():
    time.sleep(0.6)
"""


def test_the_report_ranks_tests_by_the_cpu_of_their_processes(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SUITE)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.cpu_report",
            "--cpu-top=5",
            "-n",
            "2",
            "-q",
            "-p",
            "no:cacheprovider",
            str(tmp_path),
        ],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = re.findall(r"^\s*([\d.]+)s  (\S+)$", run.stdout, re.M)
    tests = {node.split("::")[-1]: float(cpu) for cpu, node in rows if "::" in node}
    assert list(tests) == ["test_burns_in_a_child", "test_waits"], run.stdout
    assert tests["test_burns_in_a_child"] >= 0.55 and tests["test_waits"] < 0.2, run.stdout
    assert "2 tests" in run.stdout
