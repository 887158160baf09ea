"""A server a sweep started does not outlive the sweep's process, however that process ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

PARENT = """
import sys, time
from pathlib import Path
from llmhost.bench.process import ServerProcess
proc = ServerProcess([sys.executable, "-c", "import time; time.sleep(120)"], {}, Path(sys.argv[1]))
print(proc.proc.pid, flush=True)
time.sleep(120)
"""


def test_a_started_server_is_stopped_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "server.log")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert psutil.pid_exists(child)
        os.kill(parent.pid, signal.SIGKILL)  # no chance to clean up: the kernel must do it
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("the server outlived the process that started it")
    finally:
        parent.kill()
