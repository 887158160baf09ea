"""The RSS watch (a host without a kernel memory limit) counts what a kernel limit could not reclaim: a
process's anonymous memory, not the pages of a file it maps (a model's GGUF), on real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

from llmhost.endpoint.control.memlimit import MemoryLimit

MB = 2**20
# maps and reads a 96 MiB file, says so, then writes 96 MiB of its own and says so
CHILD = """
import mmap, sys
path = sys.argv[1]
with open(path, "wb") as f:
    f.truncate(96 * 2**20)
f = open(path, "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
touched = sum(m[i] for i in range(0, len(m), 4096))
print("mapped", flush=True)
sys.stdin.readline()
own = bytearray(96 * 2**20)
for i in range(0, len(own), 4096):
    own[i] = 1
print("allocated", flush=True)
sys.stdin.readline()
"""


def test_a_mapped_files_pages_do_not_count_its_own_memory_does(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "weights.bin")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    watch = MemoryLimit("rss-watch", max_mb=64)
    try:
        assert child.stdout.readline() == "mapped\n"
        assert psutil.Process(child.pid).memory_info().rss > 96 * MB  # the file's pages are resident
        assert watch.over(child.pid) is None
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "allocated\n"
        held = watch.over(child.pid)
        assert held is not None and held > 96
    finally:
        child.kill()
        child.wait()
