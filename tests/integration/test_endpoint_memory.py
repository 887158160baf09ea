"""max_memory_mb: a copy that grows past it is killed (cgroup v2 or the RSS watch) and restarted,
with the reason in its status."""

from __future__ import annotations

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


def test_copy_over_max_memory_is_killed_and_restarted(tmp_path: Path) -> None:
    ep = start_endpoint(tmp_path, ENDPOINT, wait_ping=False)
    try:

        def restarted_for_memory() -> bool:
            [r] = ep.replicas("tiny")
            reason = r["last_reason"] or ""
            return r["restarts"] >= 1 and ("max_memory_mb=100" in reason or "cgroup OOM" in reason)

        ep.wait_for("a restart over max_memory_mb", restarted_for_memory, timeout=60)
        assert "max_memory_mb=100" in ep.log.read_text()  # the reason is logged
    finally:
        stop_endpoint(ep)
