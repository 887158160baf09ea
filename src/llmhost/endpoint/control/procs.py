"""Process helpers of a copy: a free port, its RSS and CPUs, why it exited, and what runs in the child
between fork and exec (CPU pinning, dying with the endpoint, joining its memory cgroup)."""

from __future__ import annotations

import os
import re
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import psutil

from llmhost.process.children import die_with_parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except psutil.Error:
        return None


def cpus_allowed(pid: int) -> str | None:
    try:
        cpus = psutil.Process(pid).cpu_affinity() or []
    except (psutil.Error, AttributeError):  # AttributeError: no affinity on this platform
        return None
    return ",".join(map(str, cpus))


def exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


# how a copy's log says why it stops: the lifecycle's last line, else the command line's usage error
_WHY = (re.compile(r"exiting \(\d+\): (?P<why>.+)$"), re.compile(r"(?P<why>Invalid value.*?)\s*[│|]?\s*$"))


def last_words(log: Path, tail_bytes: int = 16384) -> str | None:
    """Why a copy said it stopped, from the end of its log (None: it did not say)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    starts = [i for i, line in enumerate(lines) if line.startswith("=== ")]  # the copy's last start
    lines = lines[starts[-1] :] if starts else lines
    for pattern in _WHY:
        for line in reversed(lines):
            match = pattern.search(line.strip().strip("│").strip())
            if match:
                return match["why"].strip()
    return None


def preexec(cpus: tuple[int, ...], cgroup_procs: str | None) -> Callable[[], None]:
    die_with_endpoint = die_with_parent()

    def run() -> None:  # in the child, between fork and exec: no allocation-heavy work
        os.sched_setaffinity(0, cpus)
        die_with_endpoint()
        if cgroup_procs is not None:
            try:
                with open(cgroup_procs, "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass  # watched instead

    return run
