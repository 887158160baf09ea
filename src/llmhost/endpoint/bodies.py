"""What the admin API answers (`llmhost endpoint status|scale|add|remove|load|unload|reload`), as the
single-host endpoint and the Ray one build it. The OpenAPI document shows the members every answer has
(endpoint/apidoc.py); these are the whole shapes, key order as written."""

from __future__ import annotations

import json
from typing import NotRequired

from typing_extensions import TypedDict

from llmhost.endpoint.affinity import Decision
from llmhost.shared.jsontypes import JSONObject

# what a component's model reads: "text", then what its projector adds ("vision", "audio"); None where
# no copy has said yet
Modalities = list[str] | None
MEDIA = ("vision", "audio")  # the /v1/models capabilities that are modalities


def modalities(models: str | bytes) -> Modalities:
    """A component's `modalities` from a copy's /v1/models body: text, and what its model's capabilities
    say its projector reads; None where the body is no model list (the console then shows nothing)."""
    try:
        capabilities = json.loads(models)["data"][0].get("capabilities") or []
        return ["text", *(c for c in capabilities if c in MEDIA)]
    except (ValueError, LookupError, AttributeError, TypeError):
        return None


class ReplicaStatus(TypedDict):
    """A copy of a single-host component (sizes in MiB, times in seconds)."""

    copy: str
    component: str
    state: str
    pid: int | None
    port: int
    cpus: list[int]
    cpu_share: float
    cpus_allowed: str | None  # the CPUs the process may run on, as a list ("0-3,8")
    threads: int
    memory_mb: int
    max_memory_mb: int | None
    memory_limit: str | None  # how the limit (max_memory_mb, else memory_mb) is enforced
    rss_mb: float | None
    outstanding: int
    served: int
    restarts: int
    last_reason: str | None
    ready_for_s: float | None
    log: str


class DemandStatus(TypedDict):
    """An on-demand model's loads and unloads."""

    state: str
    pinned: bool
    keep_alive: str | int | float | None
    request_keep_alive: float | None
    idle_s: float
    loads: int
    load_seconds: float
    last_load_s: float | None
    unloads: dict[str, int]
    evictions: dict[str, int]
    last_refusal: str | None


class ScaleDecision(TypedDict):
    """A decision of the autoscaler that changed the copies or held a change back."""

    at: float  # Unix time
    copies: int
    desired: int
    reason: str


class AdapterState(TypedDict):
    """A LoRA adapter a component's copies load."""

    name: str
    path: str
    scale: float
    inference_component: bool  # an adapter inference component (requests name it as a component)
    state: str  # adapter_rules.AdapterHealth: loaded, or failed (a copy refused it after it was accepted)
    reason: str | None  # why, when failed: the copy's refusal


class AdapterComponent(TypedDict):
    name: str
    base: str


class ShadowState(TypedDict):
    """What a shadow variant did with the requests copied to it (seconds; agreement 0-1)."""

    percent: float  # of the component's requests copied to it
    sent: int
    in_flight: int  # sent, not yet answered and compared
    answered: int  # 2xx
    failed: int
    dropped: int  # its copies were busy or none was ready: not sent
    mean_latency_s: float | None
    compared: int  # answered at temperature 0 beside a 2xx primary answer
    matched: int  # of them, the same output text as the primary's
    agreement: float | None  # matched / compared


class VariantState(TypedDict):
    """A production or shadow variant of a component."""

    name: str
    component: str  # the component holding its copies (COMPONENT:VARIANT)
    weight: float | None  # a production variant's; None: a shadow
    share: float | None  # weight / the production weights together
    routed: int  # requests sent to it (by weight or pinned)
    copies: int
    ready: int
    mean_latency_s: float | None  # its answers', arrival to last byte
    shadow: ShadowState | None


class ComponentState(TypedDict):
    """A single-host component: its settings, its load, its copies."""

    name: str
    model: str
    model_path: str
    model_dir: str | None
    num_cpus: float
    memory_mb: int
    copies: int
    ready: int
    in_flight: int
    waiting: int
    autoscaling: JSONObject | None  # the endpoint file's autoscaling block
    requests: dict[str, int]  # by status code
    retries: int
    routing: str
    routing_decisions: dict[Decision, int] | None  # prefix-aware routing's, by kind
    removing: bool
    decisions: list[ScaleDecision]  # the autoscaler's last
    replicas: list[ReplicaStatus]
    on_demand: DemandStatus | None
    adapters: list[AdapterState]  # the LoRA adapters its copies load
    modalities: Modalities  # what its model reads, as a ready copy's /v1/models said
    variants: NotRequired[list[VariantState]]  # a component with variants: them (it has no copies)
    variant_of: NotRequired[str]  # a variant's copies: the component whose variant they are


class EndpointState(TypedDict):
    """`endpoint status` of a single-host endpoint."""

    name: str
    instance: JSONObject  # the endpoint file's instance block
    uptime_s: float
    cpus: list[int]
    router_cpus: list[int]
    memory_mb: int
    memory_reserved_mb: int
    log_dir: str
    models_dir: str | None
    on_demand: JSONObject  # the endpoint file's on_demand block
    components: list[ComponentState]
    adapter_components: list[AdapterComponent]  # they live on their bases' copies (`components[].adapters`)


class RayReplica(TypedDict):
    copy: str
    state: str
    node_id: str
    node_ip: str
    pid: int | None
    actor_id: str


class RayComponentState(TypedDict):
    """A Ray endpoint's component, as Ray Serve reports its deployment."""

    name: str
    model: str
    num_cpus: float
    memory_mb: int
    status: str
    message: str
    copies: int
    ready: int
    in_flight: int
    autoscaling: JSONObject | None  # None while `scale` pins the copies
    pinned_copies: int | None
    requests: dict[str, int]
    retries: int
    stream_errors: int
    routing: str
    routing_decisions: dict[Decision, int] | None  # prefix-aware routing's, by kind
    replicas: list[RayReplica]
    adapters: list[AdapterState]  # the LoRA adapters its copies load (the file's, or as changed at run time)
    modalities: Modalities  # what its model reads, as a copy's /v1/models said (with its metrics' pushes)


class RayEndpointState(TypedDict):
    """`endpoint status` of a Ray endpoint."""

    name: str
    backend: str
    instance: JSONObject
    status: str
    message: str
    components: list[RayComponentState]
    adapter_components: list[AdapterComponent]  # they live on their bases' copies


class Accepted(TypedDict):
    """A change started, not awaited (`wait: false`)."""

    accepted: bool


class RayScaled(TypedDict):
    component: str
    copies: int
    ready: int


Scaled = ComponentState | RayScaled | Accepted  # with `wait: false`, Accepted


class Added(TypedDict):
    added: list[str]


class Removed(TypedDict):
    removed: str


class Unloaded(TypedDict):
    unloaded: str | None  # None: it was not loaded
    state: str


class Rescanned(TypedDict):
    added: list[str]
    removed: list[str]
    changed: list[str]


class Resources(TypedDict):
    num_cpus: float
    memory_mb: int


class ModelEntry(TypedDict):
    """A component as the endpoint's /v1/models lists it; an on-demand model with its state and the room
    it takes when loaded."""

    id: str
    object: str
    owned_by: str
    created: int
    copies: int
    ready: int
    state: NotRequired[str]
    pinned: NotRequired[bool]
    keep_alive: NotRequired[float]
    parent: NotRequired[str]  # a LoRA adapter's component (the copies' counts are the component's)
    resources: NotRequired[Resources]


class ModelList(TypedDict):
    object: str
    data: list[ModelEntry]
