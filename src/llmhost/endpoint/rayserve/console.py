"""What the console (`endpoint.console`) reads of a Ray endpoint: each copy's last push (its /metrics, CPU
time and RSS), and what the page shows beside the charts (the Ray cluster's resources, components and
copies as Ray Serve reports them).

Ray reserves logical CPUs and memory and pins nothing; it replaces a failed copy with a new one rather
than restarting it: the overview says what is not known under Ray (`unknown`) rather than guessing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from typing_extensions import TypedDict

from llmhost.endpoint.admin import LOCAL_ONLY
from llmhost.endpoint.backend import CopyFigures
from llmhost.endpoint.bodies import RayComponentState
from llmhost.endpoint.rayserve import status
from llmhost.endpoint.rayserve.admin import NO_ON_DEMAND, RayAdmin
from llmhost.endpoint.rayserve.metrics import Pushed
from llmhost.endpoint.rayserve.relay import RayComponent
from llmhost.shared.jsontypes import JSONObject, JSONValue

# Ray Serve's replica states in the console's words (the page colours these); Ray's own word stays in
# `ray_state`
STATES = {
    "STARTING": "starting",
    "UPDATING": "ready",
    "RECOVERING": "restarting",
    "RUNNING": "ready",
    "STOPPING": "draining",
    "PENDING_MIGRATION": "draining",
    "STOPPED": "stopped",
}
# what a single-host endpoint's console shows and a Ray endpoint's cannot, and why
UNKNOWN = (
    "uptime and the 15 minutes of points: the ingress's (Ray starts it again if it dies, with no points)",
    "copies' cores: Ray reserves logical CPUs on a node and pins no copy to cores",
    "memory: Ray's `memory` resource (what copies may reserve), not the nodes' physical memory; a copy's "
    "RSS is its own report",
    "restarts: Ray replaces a failed copy with a new one (a new id) and does not say why; the copies it "
    "stopped lately are listed under `stopped`",
    "per-copy load: Ray Serve's handles pick the copy, the ingress counts per component",
    "memory limits: max_memory_mb is not enforced (Ray's memory monitor kills workers on a node low on "
    "memory)",
)
SCALE_TO_ZERO = (
    "a Ray endpoint scales a component to zero only through autoscaling (min_copies: 0 in the endpoint file)"
)


class NodeFigures(TypedDict):
    """One alive node of the Ray cluster."""

    node_id: str
    ip: str
    cpus: float
    memory_mb: int


class RayHost(TypedDict):
    """The cluster in the console's host figures (the single-host console's keys; Ray's logical
    resources; no CPU sets)."""

    cpus: int
    copy_cpus: list[int]
    router_cpus: list[int]
    router_num_cpus: float
    memory_mb: int
    memory_available_mb: int
    cpus_reserved: float
    cpus_free: float
    memory_reservable_mb: int
    memory_reserved_mb: int
    memory_free_mb: int
    nodes: list[NodeFigures]


class ReplicaRow(TypedDict):
    """A copy Ray runs, in the single-host console's copy row (None: what Ray does not tell)."""

    copy: str
    component: str
    state: str
    ray_state: str
    node_id: str
    node_ip: str
    pid: int | None
    actor_id: str
    cpus: None
    cpu_share: float
    threads: int
    memory_mb: int
    max_memory_mb: None
    memory_limit: None
    rss_mb: float | None
    outstanding: None
    served: None
    restarts: None
    last_reason: None
    ready_for_s: float | None


class RayDecision(TypedDict):
    """One of Ray Serve's autoscaling decisions (its values as Ray wrote them)."""

    at: JSONValue
    copies: JSONValue
    desired: JSONValue
    reason: JSONValue


class AdminRules(TypedDict):
    """What the console's admin controls may do under Ray."""

    allowed: bool
    why_not: str | None
    scale: bool
    scale_to_zero: bool
    scale_to_zero_why: str
    add_remove: bool
    add_remove_why: str | None
    down: bool
    on_demand_why: str


@dataclass(frozen=True)
class ClusterFigures:
    """The Ray cluster's alive nodes and its resources, total and unreserved."""

    nodes: list[NodeFigures] = field(default_factory=list)
    total: dict[str, float] = field(default_factory=dict)
    free: dict[str, float] = field(default_factory=dict)


def cluster_figures() -> ClusterFigures:
    """From Ray's GCS (blocking: call it off the event loop)."""
    import ray

    nodes: list[NodeFigures] = [
        {
            "node_id": n.get("NodeID", ""),
            "ip": n.get("NodeManagerAddress", ""),
            "cpus": float(n.get("Resources", {}).get("CPU", 0.0)),
            "memory_mb": int(n.get("Resources", {}).get("memory", 0.0) // 2**20),
        }
        for n in ray.nodes()
        if n.get("Alive")
    ]
    total = {str(k): float(v) for k, v in ray.cluster_resources().items()}
    return ClusterFigures(nodes, total, {str(k): float(v) for k, v in ray.available_resources().items()})


def copy_figures(components: Mapping[str, RayComponent], pushed: Mapping[str, Pushed]) -> list[CopyFigures]:
    """Each copy Ray runs, with its last push: its metrics, CPU time and RSS (none before its first)."""
    out = []
    for comp in components.values():
        res = comp.spec.resources
        for r in comp.view.replicas:
            p = pushed.get(r.copy)
            families = _families(p.text) if p is not None else None
            cpu_s, rss_mb = (p.cpu_s, p.rss_mb) if p is not None else (None, None)
            out.append(
                CopyFigures(
                    comp.name, r.copy, r.copy, families, cpu_s, rss_mb, res.num_cpus, float(res.memory_mb)
                )
            )
    return out


def _families(text: str) -> list[Metric] | None:
    try:
        return list(text_string_to_metric_families(text))
    except ValueError:  # not the exposition format
        return None


def host(cluster: ClusterFigures, router_num_cpus: float) -> RayHost:
    """The cluster in the console's host figures: Ray's logical CPUs and `memory` resource."""
    cpus, free_cpus = cluster.total.get("CPU", 0.0), cluster.free.get("CPU", 0.0)
    mb = int(cluster.total.get("memory", 0.0) // 2**20)
    free_mb = int(cluster.free.get("memory", 0.0) // 2**20)
    return {
        "cpus": int(cpus),
        "copy_cpus": [],
        "router_cpus": [],
        "router_num_cpus": router_num_cpus,
        "memory_mb": mb,
        "memory_available_mb": free_mb,
        "cpus_reserved": round(cpus - free_cpus, 3),
        "cpus_free": round(free_cpus, 3),
        "memory_reservable_mb": mb,
        "memory_reserved_mb": mb - free_mb,
        "memory_free_mb": free_mb,
        "nodes": cluster.nodes,
    }


def _age(started_at: float | None, now: float) -> float | None:
    return round(now - started_at, 1) if started_at is not None else None


def replica_row(comp: RayComponent, r: status.Replica, pushed: Pushed | None, now: float) -> ReplicaRow:
    res = comp.spec.resources
    return {
        "copy": r.copy,
        "component": comp.name,
        "state": STATES.get(r.state, r.state.lower()),
        "ray_state": r.state,
        "node_id": r.node_id,
        "node_ip": r.node_ip,
        "pid": r.pid,
        "actor_id": r.actor_id,
        "cpus": None,
        "cpu_share": res.num_cpus,
        "threads": res.threads,
        "memory_mb": res.memory_mb,
        "max_memory_mb": None,
        "memory_limit": None,
        "rss_mb": round(pushed.rss_mb, 1) if pushed and pushed.rss_mb is not None else None,
        "outstanding": None,
        "served": None,
        "restarts": None,
        "last_reason": None,
        "ready_for_s": _age(r.started_at, now),
    }


def decision(raw: JSONObject) -> RayDecision:
    """One of Ray Serve's autoscaling decisions, as the console shows the single-host autoscaler's."""
    return {
        "at": raw.get("timestamp_s"),
        "copies": raw.get("prev_num_replicas"),
        "desired": raw.get("curr_num_replicas"),
        "reason": raw.get("reason", ""),
    }


def component_block(
    comp: RayComponent, entry: RayComponentState, pushed: Mapping[str, Pushed], now: float
) -> dict[str, Any]:
    """`entry`: the component's `endpoint status` entry, with what the page shows beside it."""
    v = comp.view
    stopped = [
        {"copy": r.copy, "ray_state": r.state, "node_id": r.node_id, "pid": r.pid, "started_at": r.started_at}
        for r in v.dead
    ]
    return {
        **entry,
        "waiting": comp.waiting,
        "no_capacity": comp.no_capacity,
        "embeddings": comp.spec.embeddings,
        "decisions": [decision(d) for d in v.decisions],
        "stopped": stopped,
        "replicas": [replica_row(comp, r, pushed.get(r.copy), now) for r in v.replicas],
    }


def admin_block(local: bool) -> AdminRules:
    """The admin API's rules under Ray: local clients only, scale to one or more copies, `down`; the
    components are the file's (no add or remove) and there are no on-demand models."""
    return {
        "allowed": local,
        "why_not": None if local else LOCAL_ONLY,
        "scale": True,
        "scale_to_zero": False,
        "scale_to_zero_why": SCALE_TO_ZERO,
        "add_remove": False,
        "add_remove_why": RayAdmin.components_fixed,
        "down": True,
        "on_demand_why": NO_ON_DEMAND,
    }
