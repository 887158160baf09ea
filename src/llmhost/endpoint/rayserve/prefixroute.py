"""Prefix-aware routing on a Ray endpoint: a Ray Serve request router for a component's deployment
(its `request_router_config`), choosing as the single-host router does (`llmhost.endpoint.affinity`).
A deployment handle cannot address one copy, so the choice is made where Ray makes it: in the handle's
router, inside the ingress. The load of a copy is its queue length as Ray's router last saw it.

Ray sends this module to the ingress pickled by value (`RequestRouterConfig` registers a request router's
module with cloudpickle so): an object of another module named here arrives as a copy, while a class or
function of another module is pickled by reference. So the router registers its Affinity through
`affinity.register_ray_router`, which writes the registry the ingress's /metrics reads, not a copy of it."""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import FIFOMixin, PendingRequest, ReplicaID, RequestRouter, RunningReplica

from llmhost.endpoint.affinity import Affinity, Decision, register_ray_router

PENDING_MAX = 10_000  # requests cancelled before Ray routed them are forgotten beyond this many


class PrefixRequestRouter(FIFOMixin, RequestRouter):  # type: ignore[misc]
    def initialize_state(
        self, component: str = "", block_chars: int = 256, load_factor: float = 0.25, **_: Any
    ) -> None:
        self.affinity = Affinity(block_chars, load_factor)
        register_ray_router(component, self.affinity)
        # request id → its prompt's block hashes and the decision made, until Ray says where it went
        self.pending: dict[str, tuple[list[bytes], str, Decision]] = {}

    def _load(self, replica: RunningReplica) -> float:
        queued = self.replica_queue_len_cache.get(replica.replica_id)
        return float(queued or 0)

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        """The chosen copy first; the others after it, should it refuse (its queue full)."""
        if not candidate_replicas:
            return []
        call = pending_request.args[0] if pending_request is not None and pending_request.args else None
        body = getattr(call, "body", b"")
        hashes = self.affinity.hashes(body) if isinstance(body, bytes) else []
        chosen, decision = self.affinity.decide(
            hashes, candidate_replicas, _key, self._load, lambda cs: min(cs, key=self._load)
        )
        if pending_request is not None:
            self.pending[pending_request.metadata.internal_request_id] = (hashes, _key(chosen), decision)
            while len(self.pending) > PENDING_MAX:
                del self.pending[next(iter(self.pending))]
        return [[chosen], [r for r in candidate_replicas if r is not chosen]]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        hashes, chosen, decision = self.pending.pop(
            pending_request.metadata.internal_request_id, ([], "", Decision.COLD)
        )
        copy = replica_id.unique_id
        if copy != chosen and decision == Decision.PREFIX:
            decision = Decision.SPILLED  # the copy chosen refused it (queue full)
        self.affinity.routed(hashes, copy, decision)


def _key(replica: RunningReplica) -> str:
    return str(replica.replica_id.unique_id)
