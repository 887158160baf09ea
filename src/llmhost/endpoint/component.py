"""One inference component at run time: its copies, its load, and waiting for a ready copy."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from llmhost.endpoint.affinity import Affinity, Policy
from llmhost.endpoint.autoscaler import ScalerState
from llmhost.endpoint.replica import Replica, ReplicaState
from llmhost.endpoint.spec import ComponentSpec
from llmhost.store.model import ResolvedModel


def least_outstanding(ready: Sequence[Replica]) -> Replica:
    return min(ready, key=lambda r: (r.outstanding, r.served, r.index))


class Component:
    def __init__(self, spec: ComponentSpec, model: ResolvedModel) -> None:
        self.spec = spec
        self.name = spec.name
        self.model = model  # resolved once, when the component was added: copies reuse it
        self.replicas: list[Replica] = []
        self.in_flight = 0  # requests at the router for this component, waiting ones included
        self.peak = 0  # most in flight since the autoscaler last looked
        self.waiting = 0  # requests waiting for a ready copy
        self.requests: Counter[int] = Counter()  # by HTTP status the router answered
        self.retries = 0  # requests re-sent to another copy after a connection failure
        self.stream_errors = 0  # streams cut by a failing copy
        self.scaler = ScalerState()
        routing = spec.routing
        # prefix-aware routing's index and counts; None: least outstanding
        self.affinity = (Affinity(routing.block_chars, routing.load_factor)
                         if routing.policy == Policy.PREFIX.value else None)  # fmt: skip
        self.removing = False
        self.lock = asyncio.Lock()  # one scaling operation at a time
        self._next_index = 0
        self._changed = asyncio.Event()

    def new_index(self) -> int:
        i = self._next_index
        self._next_index += 1
        return i

    # --- copies ----------------------------------------------------------------------------------

    def ready(self) -> list[Replica]:
        return [r for r in self.replicas if r.state == ReplicaState.READY]

    def capacity(self) -> list[Replica]:
        return [r for r in self.replicas if r.counts_as_capacity]

    @property
    def serving(self) -> bool:
        """Has a ready copy, or is meant to have none (scaled to zero)."""
        return bool(self.ready()) or (not self.capacity() and not self.removing)

    def notify(self, _replica: Replica | None = None) -> None:
        """A copy changed state: wake the requests waiting for one."""
        event, self._changed = self._changed, asyncio.Event()
        event.set()

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
            if replica is not None or self.removing:
                return replica
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))

    # --- load ------------------------------------------------------------------------------------

    def enter(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1

    def take_peak(self) -> int:
        peak, self.peak = self.peak, self.in_flight
        return peak

    def status(self) -> dict[str, Any]:
        a = self.spec.autoscaling
        return {
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
            "routing_decisions": dict(self.affinity.decisions) if self.affinity is not None else None,
            "removing": self.removing,
            "replicas": [r.status() for r in self.replicas],
        }
