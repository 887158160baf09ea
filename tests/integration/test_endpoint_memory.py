"""A copy's memory limit (max_memory_mb, else its memory_mb reservation): a copy that grows past it is
killed (by the kernel through a cgroup where the host allows one, else by the RSS watch) and restarted,
with the reason and the mechanism in its status."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.integration.endpoint_helpers import ENGINE, start_endpoint, stop_endpoint

ENDPOINT = """
name: mem
components:
  - name: tiny
    resources: {{num_cpus: 0.5, {resources}}}
    engine: {engine}
    startup_health_check_timeout_s: 60
"""


def cgroup_v1_memory_writable() -> bool:
    """This host's case: a hybrid cgroup layout whose v1 memory group of ours accepts children."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return False
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return os.access(Path("/sys/fs/cgroup/memory") / path.lstrip("/"), os.W_OK)
    return False


# a Python process with llama.cpp loaded takes more than 100 MB before any model: killed while loading
@pytest.mark.parametrize(
    ("resources", "limit"),
    [
        ("memory_mb: 50, max_memory_mb: 100", "max_memory_mb=100"),
        ("memory_mb: 100", "memory_mb=100"),  # no max_memory_mb: the reservation is the limit
    ],
)
def test_copy_over_its_limit_is_killed_and_restarted(tmp_path: Path, resources: str, limit: str) -> None:
    ep = start_endpoint(tmp_path, ENDPOINT.format(resources=resources, engine=ENGINE), wait_ping=False)
    said = re.compile(rf"(over|exceeded) {limit} MB")
    try:

        def restarted_for_memory() -> bool:
            [r] = ep.replicas("tiny")
            return r["restarts"] >= 1 and said.search(r["last_reason"] or "") is not None

        ep.wait_for(f"a restart over {limit}", restarted_for_memory, timeout=60)
        assert said.search(ep.log.read_text())  # the reason is logged
        [r] = ep.replicas("tiny")
        assert r["max_memory_mb"] == 100, r
        expected = "cgroup-v1" if cgroup_v1_memory_writable() else r["memory_limit"]
        assert r["memory_limit"] == expected, r
        if r["memory_limit"] != "rss-watch":
            assert "kernel OOM kill" in r["last_reason"], r["last_reason"]
    finally:
        stop_endpoint(ep)
