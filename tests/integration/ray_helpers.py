"""A two-node Ray cluster on 127.0.0.1 (two raylets with one CPU each, as `ray start --head` and
`ray start --address=...` would make on two hosts), and `llmhost endpoint up --ray` onto it."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.integration.endpoint_helpers import Endpoint, stop_endpoint

# Ray resolves a loopback address to the host's IP unless multi-host clusters are off; with them off
# every Ray process (raylets, GCS, this test's driver) stays on 127.0.0.1. Read when Ray is imported.
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
STARTUP_TIMEOUT_S = 240  # a loaded 2-core host: Ray, Serve, then each copy loading its model
RAYLET_ENV = {
    # Ray Serve reports a copy it cannot place after this many seconds (default 30)
    "RAY_SERVE_SLOW_STARTUP_WARNING_S": "3",
    "RAY_SERVE_SLOW_STARTUP_WARNING_PERIOD_S": "3",
    # its HTTP proxy gets 5 s to start by default: not always enough on a loaded 2-core host
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
}


@dataclass
class RayCluster:
    cluster: Any  # ray.cluster_utils.Cluster
    address: str
    node_ids: set[str]
    dashboard_url: str  # Ray Serve's REST API

    def shutdown(self) -> None:
        self.cluster.shutdown()


# Ray's worker processes take ports in [10002, 19999] (its min/max_worker_port defaults)
RAY_WORKER_PORTS_END = 19999


def quiet_port() -> int:
    """A free port that no process here is handed by the kernel: between Ray's worker ports and the
    ephemeral range that bind(0) draws from. Ray's own processes bind ephemeral ports at any time (a
    driver's gRPC server took a Serve port picked with bind(0) once, its proxy never started, and every
    test of the module failed), and so do the other test workers' servers."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        candidate = random.randint(RAY_WORKER_PORTS_END + 1, low - 1)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    raise RuntimeError(f"no free port in {RAY_WORKER_PORTS_END + 1}..{low - 1}")


def start_cluster() -> RayCluster:
    from ray.cluster_utils import Cluster

    common = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "env_vars": RAYLET_ENV}
    dashboard_port = quiet_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **common,
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": dashboard_port,
            "gcs_server_port": quiet_port(),
        },
    )
    cluster.add_node(**common)
    cluster.wait_for_nodes()
    nodes = {n.node_id for n in cluster.list_all_nodes()}
    return RayCluster(cluster, cluster.address, nodes, f"http://127.0.0.1:{dashboard_port}")


def ray_up_command(file: Path, port: int, address: str, *extra: str) -> list[str]:
    """`address` empty: the endpoint starts its own local Ray."""
    return [
        sys.executable,
        "-m",
        "llmhost.cli",
        "endpoint",
        "up",
        str(file),
        "--ray",
        *(["--ray-address", address] if address else []),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--health-interval",
        "1",
        "--health-timeout",
        "30",
        "--drain-timeout",
        "5",
        *extra,
    ]


def launch_ray_endpoint(tmp: Path, yaml_text: str, address: str, *extra: str, port: int = 0) -> Endpoint:
    """`endpoint up --ray` in a subprocess, its output in tmp/endpoint.log; not waited for."""
    file = tmp / "endpoint.yaml"
    file.write_text(yaml_text)
    port = port or quiet_port()
    log = tmp / "endpoint.log"
    with log.open("wb") as out:
        env = {**os.environ, **LOOPBACK_ONLY, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            ray_up_command(file, port, address, *extra), stdout=out, stderr=subprocess.STDOUT, env=env
        )
    return Endpoint(f"http://127.0.0.1:{port}", port, proc, log, tmp)


def start_ray_endpoint(tmp: Path, yaml_text: str, address: str, *extra: str, port: int = 0) -> Endpoint:
    """`endpoint up --ray` in a subprocess, returned once it says it runs and /ping answers 200."""
    ep = launch_ray_endpoint(tmp, yaml_text, address, *extra, port=port)
    try:
        _wait_ready(ep)
    except BaseException:
        stop_endpoint(ep)  # whatever stopped the wait, nothing stays behind
        raise
    return ep


def _wait_ready(ep: Endpoint) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if ep.process.poll() is not None:
            raise RuntimeError(f"endpoint exited with {ep.process.returncode}:\n{ep.log.read_text()[-5000:]}")
        if "running on Ray Serve" in ep.log.read_text():
            try:
                if httpx.get(f"{ep.url}/ping", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
        time.sleep(0.5)
    raise RuntimeError(f"endpoint not ready within {STARTUP_TIMEOUT_S} s:\n{ep.log.read_text()[-5000:]}")


def component(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in status["components"] if c["name"] == name)
