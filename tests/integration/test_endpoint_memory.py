"""max_memory_mb: a copy that grows past it is killed (by the kernel through a cgroup where the host
allows one, else by the RSS watch) and restarted, with the reason and the mechanism in its status."""

from __future__ import annotations

import os
from pathlib import Path

from tests.integration.endpoint_helpers import ENGINE, start_endpoint, stop_endpoint

ENDPOINT = f"""
name: mem
components:
  - name: tiny
    resources: {{num_cpus: 0.5, memory_mb: 50, max_memory_mb: 100}}
    engine: {ENGINE}
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


def test_copy_over_max_memory_is_killed_and_restarted(tmp_path: Path) -> None:
    ep = start_endpoint(tmp_path, ENDPOINT, wait_ping=False)
    try:

        def restarted_for_memory() -> bool:
            [r] = ep.replicas("tiny")
            reason = r["last_reason"] or ""
            return r["restarts"] >= 1 and "max_memory_mb=100" in reason

        ep.wait_for("a restart over max_memory_mb", restarted_for_memory, timeout=60)
        assert "max_memory_mb=100" in ep.log.read_text()  # the reason is logged
        [r] = ep.replicas("tiny")
        expected = "cgroup-v1" if cgroup_v1_memory_writable() else r["memory_limit"]
        assert r["memory_limit"] == expected, r
        if r["memory_limit"] != "rss-watch":
            assert "kernel OOM kill" in r["last_reason"], r["last_reason"]
    finally:
        stop_endpoint(ep)
