"""What Ray Serve's details say about one deployment (a component), read from `ServeInstanceDetails`
as its REST API returns it. Pure: no Ray, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmhost.shared.jsontypes import JSONObject

# replica states Ray Serve routes requests to: UPDATING is a running copy in `reconfigure` (its
# adapters changing), which Ray keeps routing to
SERVING = frozenset({"RUNNING", "UPDATING"})
# replica states Ray Serve counts as on their way to serving (or back to it)
STARTING = frozenset({"STARTING", "RECOVERING", "PENDING_MIGRATION"})
# a deployment whose copies Ray could not place, as Ray says it
UNSCHEDULABLE = "to be scheduled"


@dataclass(frozen=True)
class Replica:
    copy: str  # `{component}-{Ray's replica id}`, as answers carry it in X-Llmhost-Copy
    state: str
    node_id: str
    node_ip: str
    pid: int | None
    actor_id: str
    started_at: float | None = None  # Unix time Ray started its actor

    @classmethod
    def of(cls, component: str, raw: dict[str, Any]) -> Replica:
        started = raw.get("start_time_s")
        return cls(
            f"{component}-{raw.get('replica_id', '?')}",
            str(raw.get("state", "")),
            str(raw.get("node_id") or ""),
            str(raw.get("node_ip") or ""),
            raw.get("pid"),
            str(raw.get("actor_id") or ""),
            float(started) if isinstance(started, int | float) else None,
        )


@dataclass(frozen=True)
class DeploymentView:
    known: bool = False  # False until Ray Serve's details named this deployment
    status: str = "UNKNOWN"
    message: str = ""
    target: int = 0  # copies Ray Serve is driving towards
    replicas: tuple[Replica, ...] = field(default_factory=tuple)
    required: dict[str, float] = field(default_factory=dict)  # Ray resources one copy takes
    dead: tuple[Replica, ...] = field(default_factory=tuple)  # copies Ray stopped lately (it keeps a few)
    # Ray Serve's autoscaler's recent decisions, where its (experimental) detail lists them
    decisions: tuple[JSONObject, ...] = field(default_factory=tuple)

    @property
    def running(self) -> int:
        return sum(1 for r in self.replicas if r.state in SERVING)

    @property
    def starting(self) -> int:
        return sum(1 for r in self.replicas if r.state in STARTING)

    @property
    def unschedulable(self) -> bool:
        """Ray says a copy waits to be placed: for resources, or only for a slow worker to start."""
        return UNSCHEDULABLE in self.message

    def short_of(self, resources: dict[str, float]) -> list[str]:
        """The resources one copy needs beyond `resources` (a node's, or the cluster's free ones)."""
        return sorted(k for k, need in self.required.items() if need > resources.get(k, 0.0) + 1e-9)


@dataclass
class Placement:
    """Whether a component's waiting copy can be placed, judged on Ray's report and resources.

    Ray says a copy "has taken more than N s to be scheduled" both when no node has room and while
    a slow worker process starts on resources already reserved (the cluster's free resources then look
    short too), so only a copy no node could ever hold is refused at once; one the cluster lacks room
    for now is given up on after `patience_s` of Ray saying so."""

    patience_s: float
    since: float | None = None

    def verdict(
        self, view: DeploymentView, node_totals: list[dict[str, float]], free: dict[str, float], now: float
    ) -> str | None:
        """None while the copy may still be placed; else our word, then Ray's."""
        if not view.unschedulable or view.starting == 0:
            self.since = None
            return None
        if not any(not view.short_of(total) for total in node_totals):
            return f"no node of the Ray cluster has the resources for one copy; Ray says: {view.message}"
        short = view.short_of(free)
        if not short:
            self.since = None
            return None
        self.since = now if self.since is None else self.since
        if now - self.since < self.patience_s:
            return None
        return (
            f"the cluster has been short of {', '.join(short)} for one more copy for "
            f"{self.patience_s:g} s; Ray says: {view.message}"
        )


def application(details: dict[str, Any], app: str) -> dict[str, Any] | None:
    found = details.get("applications", {}).get(app)
    return found if isinstance(found, dict) else None


def deployment_view(details: dict[str, Any], app: str, name: str) -> DeploymentView:
    raw = (application(details, app) or {}).get("deployments", {}).get(name)
    if not isinstance(raw, dict):
        return DeploymentView()
    replicas = tuple(Replica.of(name, r) for r in raw.get("replicas", []))
    required = {str(k): float(v) for k, v in (raw.get("required_resources") or {}).items()}
    dead = tuple(Replica.of(name, r) for r in raw.get("recent_dead_replicas") or [])
    decisions = tuple(
        d for d in ((raw.get("autoscaling_detail") or {}).get("decisions") or []) if isinstance(d, dict)
    )
    return DeploymentView(
        True,
        str(raw.get("status", "")),
        str(raw.get("message", "")),
        int(raw.get("target_num_replicas") or 0),
        replicas,
        required,
        dead,
        decisions,
    )


def deployment_overrides(details: dict[str, Any], app: str) -> list[dict[str, Any]]:
    """The deployment overrides of the application's deployed config (what `scale` changed)."""
    config = (application(details, app) or {}).get("deployed_app_config") or {}
    return [dict(d) for d in config.get("deployments", [])]


def with_override(overrides: list[dict[str, Any]], override: dict[str, Any]) -> list[dict[str, Any]]:
    """`override` over the deployment's own (what `scale` pinned stays when its adapters change)."""
    old = next((o for o in overrides if o.get("name") == override["name"]), {})
    return [*(o for o in overrides if o.get("name") != override["name"]), {**old, **override}]
