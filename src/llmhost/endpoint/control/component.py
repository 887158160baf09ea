"""One inference component at run time: its copies, its load, and waiting for a ready copy."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from llmhost.endpoint.adapters import rules as adapter_rules
from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.endpoint.affinity import Affinity, Decision, Policy
from llmhost.endpoint.bodies import AdapterState, ComponentState, DemandStatus, ScaleDecision
from llmhost.endpoint.control.autoscaler import ScalerState
from llmhost.endpoint.control.replica import Replica, ReplicaState
from llmhost.endpoint.control.variants import VariantSet
from llmhost.endpoint.front import FrontCounters
from llmhost.endpoint.spec import ComponentSpec, OnDemandSpec
from llmhost.store.model import ResolvedModel


class ModelState(StrEnum):
    # no copy: the room it takes when loaded is free for others
    UNLOADED = "unloaded"
    # a load is under way: waiting for room, or its copy starting (or restarting after a crash)
    LOADING = "loading"
    # its copy is ready
    LOADED = "loaded"
    # its copy drains (no new requests; those in flight finish), then stops
    UNLOADING = "unloading"


@dataclass(frozen=True)
class Refusal:
    """Why the last load of an on-demand model failed: the answer the requests waiting for it get."""

    status: int
    message: str
    type: str


@dataclass
class Demand:
    """An on-demand component's lifecycle figures (see `ondemand.ModelPool`)."""

    spec: OnDemandSpec
    last_used: float = field(default_factory=time.monotonic)
    # the keep_alive the last request asked for (None: the component's)
    request_keep_alive: float | None = None
    loading: asyncio.Task[None] | None = None  # the one load under way
    refusal: Refusal | None = None
    loads: int = 0
    load_seconds: float = 0.0  # summed over loads: a copy's start until it passed /ping
    last_load_s: float | None = None
    unloads: Counter[str] = field(default_factory=Counter)  # by reason: idle, evicted, admin, removed
    evictions: Counter[str] = field(default_factory=Counter)  # by what was short: max_loaded, memory, cpus

    @property
    def keep_alive(self) -> float:
        return self.spec.keep_alive if self.request_keep_alive is None else self.request_keep_alive


def least_outstanding(ready: Sequence[Replica]) -> Replica:
    return min(ready, key=lambda r: (r.outstanding, r.served, r.index))


class Component(FrontCounters):
    def __init__(self, spec: ComponentSpec, model: ResolvedModel) -> None:
        super().__init__(spec.name)
        self.spec = spec
        self.model = model  # resolved once, when the component was added: copies reuse it
        self.replicas: list[Replica] = []
        self.peak = 0  # most in flight since the autoscaler last looked
        self.scaler = ScalerState()
        # the autoscaler's last decisions that changed something or held a change back, newest last
        self.decisions: deque[ScaleDecision] = deque(maxlen=20)
        routing = spec.routing
        # prefix-aware routing's index and counts; None: least outstanding
        self.affinity = (
            Affinity(routing.block_chars, routing.load_factor)
            if routing.policy == Policy.PREFIX.value
            else None
        )
        self.removing = False
        # the LoRA adapters its copies load: the file's, adapter components', those loaded at run time
        self.adapter_entries: dict[str, AdapterEntry] = {a.name: a for a in spec.adapters}
        self.adapter_failures: dict[str, str] = {}  # adapter -> why a copy refused it (AdapterHealth.FAILED)
        # one adapter change (load, unload, a copy catching up) at a time; scaling does not wait for it
        self.adapter_lock = asyncio.Lock()
        self.on_ready: Callable[[Replica], None] | None = None  # a copy became ready
        self.on_failed: Callable[[Replica], None] | None = None  # a copy failed (its last_reason says why)
        self.lock = asyncio.Lock()  # one scaling operation at a time
        self._next_index = 0
        self._changed = asyncio.Event()
        self.demand = Demand(spec.on_demand) if spec.on_demand is not None else None
        self.on_leave: Callable[[], None] | None = None  # a request left: room or idleness may follow
        # a component with variants: they have the copies, it has none; its requests go to them
        self.variants: VariantSet[Component] | None = None
        # a variant's copies: the component whose variant they are (its name is what the copies serve)
        self.variant_of: str | None = None

    @property
    def served_name(self) -> str:
        """The model name its copies answer to: the component the requests name."""
        return self.variant_of or self.name

    def members(self) -> list[Component]:
        """Its variants' components (none without variants)."""
        return [v.component for v in self.variants.variants] if self.variants is not None else []

    def _production(self) -> list[Component]:
        assert self.variants is not None
        return [v.component for v in self.variants.production]

    @property
    def adapters(self) -> frozenset[str]:
        return frozenset(self.adapter_entries)

    def adapter_components(self) -> list[str]:
        """The adapter components living on its copies."""
        return [a.name for a in self.adapter_entries.values() if a.inference_component]

    def adapter_list(self) -> list[AdapterEntry]:
        return list(self.adapter_entries.values())

    def startable_adapters(self) -> list[AdapterEntry]:
        """What a copy starting now loads (`--lora`): not a failed adapter, which would stop its start."""
        return [a for a in self.adapter_entries.values() if a.name not in self.adapter_failures]

    def new_index(self) -> int:
        i = self._next_index
        self._next_index += 1
        return i

    # --- copies ----------------------------------------------------------------------------------

    def ready(self) -> list[Replica]:
        """Copies that serve: passed /ping, and their adapters brought up to date (`catching_up`); a
        component with variants: its production variants' ready copies."""
        if self.variants is not None:
            return [r for c in self._production() for r in c.ready()]
        return [r for r in self.replicas if r.state == ReplicaState.READY and not r.catching_up]

    def capacity(self) -> list[Replica]:
        if self.variants is not None:
            return [r for c in self._production() for r in c.capacity()]
        return [r for r in self.replicas if r.counts_as_capacity]

    @property
    def serving(self) -> bool:
        """Has a ready copy, or is meant to have none (scaled to zero)."""
        return bool(self.ready()) or (not self.capacity() and not self.removing)

    def notify(self, replica: Replica | None = None) -> None:
        """A copy changed state: wake the requests waiting for one (and bring a ready one's adapters up
        to date)."""
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        if replica is not None and replica.state == ReplicaState.READY and self.on_ready is not None:
            self.on_ready(replica)
        elif replica is not None and replica.state == ReplicaState.FAILED and self.on_failed is not None:
            self.on_failed(replica)

    def prefix_hashes(self, body: bytes) -> list[bytes]:
        """What prefix-aware routing keys a request on (nothing with least-outstanding routing)."""
        return self.affinity.hashes(body) if self.affinity is not None else []

    def pick(
        self, exclude: set[str] | frozenset[str] = frozenset(), prefix: Sequence[bytes] = ()
    ) -> Replica | None:
        """A ready copy not in `exclude` (by `Replica.key`, so a copy that failed and restarted is
        eligible again): with prefix-aware routing, the one holding the longest part of `prefix`
        within the load bound (`llmhost.endpoint.affinity`); else least outstanding requests, ties to
        the one that served fewer."""
        ready = [r for r in self.ready() if r.key not in exclude]
        if not ready:
            return None
        if self.affinity is None:
            return least_outstanding(ready)
        return self.affinity.pick(prefix, ready, lambda r: r.key, lambda r: r.outstanding, least_outstanding)

    async def wait_for_copy(
        self, timeout_s: float, exclude: set[str] | frozenset[str] = frozenset(), prefix: Sequence[bytes] = ()
    ) -> Replica | None:
        deadline = time.monotonic() + timeout_s
        while True:
            replica = self.pick(exclude, prefix)
            if replica is not None or self.removing or self.refusal is not None:
                return replica
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))

    @property
    def refusal(self) -> Refusal | None:
        """Why the last load failed (on-demand components), for the requests that waited for it."""
        return self.demand.refusal if self.demand is not None else None

    @property
    def state(self) -> ModelState:
        if self.ready():
            return ModelState.LOADED
        task = self.demand.loading if self.demand is not None else None
        if (task is not None and not task.done()) or self.capacity():
            return ModelState.LOADING
        if self.replicas:
            return ModelState.UNLOADING
        return ModelState.UNLOADED

    def idle_for(self, now: float) -> float:
        """Seconds since its last request ended (0 with requests in flight)."""
        if self.in_flight or self.demand is None:
            return 0.0
        return now - self.demand.last_used

    # --- load ------------------------------------------------------------------------------------

    def enter(self) -> None:
        super().enter()
        self.peak = max(self.peak, self.in_flight)
        if self.demand is not None:
            self.demand.last_used = time.monotonic()

    def leave(self) -> None:
        super().leave()
        if self.demand is not None:
            self.demand.last_used = time.monotonic()
        if self.on_leave is not None:
            self.on_leave()

    def take_peak(self) -> int:
        peak, self.peak = self.peak, self.in_flight
        return peak

    @property
    def routing_decisions(self) -> dict[Decision, int] | None:
        """Prefix-aware routing's decisions so far, by kind; None under least outstanding."""
        return dict(self.affinity.decisions) if self.affinity is not None else None

    def status(self) -> ComponentState:
        a = self.spec.autoscaling
        state: ComponentState = {
            "name": self.name,
            "model": self.spec.model,
            "model_path": str(self.model.gguf),
            "model_dir": str(self.model.model_dir) if self.model.model_dir is not None else None,
            "num_cpus": self.spec.resources.num_cpus,
            "memory_mb": self.spec.resources.memory_mb,
            "copies": len(self.capacity()),
            "ready": len(self.ready()),
            "in_flight": self.in_flight,
            "waiting": self.waiting,
            "autoscaling": a.model_dump() if a else None,
            "requests": {str(k): v for k, v in sorted(self.requests.items())},
            "retries": self.retries,
            "routing": self.spec.routing.policy,
            "routing_decisions": self.routing_decisions,
            "removing": self.removing,
            "decisions": list(self.decisions),
            "replicas": [r.status() for r in self.replicas],
            "on_demand": self.demand_status(),
            "adapters": [self.adapter_state(a) for a in self.adapter_entries.values()],
            "modalities": next((r.modalities for r in self.replicas if r.modalities is not None), None),
        }
        if self.variants is not None:
            state["variants"] = self.variants.status()
        if self.variant_of is not None:
            state["variant_of"] = self.variant_of
        return state

    def adapter_state(self, a: AdapterEntry) -> AdapterState:
        return adapter_rules.adapter_state(a, self.adapter_failures.get(a.name))

    def demand_status(self) -> DemandStatus | None:
        d = self.demand
        if d is None:
            return None
        return {
            "state": self.state.value,
            "pinned": d.spec.pinned,
            "keep_alive": d.spec.keep_alive,
            "request_keep_alive": d.request_keep_alive,
            "idle_s": round(self.idle_for(time.monotonic()), 1),
            "loads": d.loads,
            "load_seconds": round(d.load_seconds, 3),
            "last_load_s": round(d.last_load_s, 3) if d.last_load_s is not None else None,
            "unloads": dict(d.unloads),
            "evictions": dict(d.evictions),
            "last_refusal": d.refusal.message if d.refusal else None,
        }
