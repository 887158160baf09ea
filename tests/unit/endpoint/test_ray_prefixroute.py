"""Prefix-aware routing's request router as Ray Serve hands it to the ingress: the class out of the
deployment's `RequestRouterConfig` (which Ray pickles by value), routing real `PendingRequest`s, its
decisions read where the ingress's /metrics and /admin/status read them. No Ray cluster: the copies
are stand-ins holding a real `ReplicaID` (Ray's `RunningReplica` looks up its actor when built), which
is all the router reads of them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from ray.serve._private.common import DeploymentHandleSource, DeploymentID, ReplicaID, RequestMetadata
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import PendingRequest

from llmhost.endpoint.affinity import RAY_ROUTERS, Decision
from llmhost.endpoint.metrics import render_metrics
from llmhost.endpoint.rayserve.inprocess import Call
from llmhost.endpoint.rayserve.options import router_options
from llmhost.endpoint.rayserve.relay import RayComponent
from llmhost.endpoint.spec import ComponentSpec
from tests.unit.endpoint.ray_fakes import ray_backend

SPEC = ComponentSpec.model_validate({"name": "p", "routing": {"policy": "prefix", "block_chars": 16}})
DEPLOYMENT = DeploymentID(name="p", app_name="e")


@pytest.fixture(autouse=True)
def registry() -> Iterator[None]:
    RAY_ROUTERS.pop("p", None)
    yield
    RAY_ROUTERS.pop("p", None)


def router_as_ray_builds_it() -> Any:
    """As the ingress's deployment handle builds it: the class from the config Ray deployed, unpickled,
    constructed, then given the config's kwargs."""
    config = RequestRouterConfig(**router_options(SPEC)["request_router_config"])
    cls = config.get_request_router_class()
    router = cls(deployment_id=DEPLOYMENT, handle_source=DeploymentHandleSource.REPLICA)
    router.initialize_state(**config.request_router_kwargs)
    return router


@dataclass(frozen=True)
class Copy:
    replica_id: ReplicaID


async def route(router: Any, replicas: list[Copy], n: int, prompt: str) -> Copy:
    """One request as Ray's router handles it: choose, then (the copy accepted it) routed."""
    body = json.dumps({"model": "p", "prompt": prompt}).encode()
    call = Call("POST", "/v1/completions", body=body)
    pending = PendingRequest([call], {}, RequestMetadata(f"r{n}", f"i{n}"))
    (chosen, *_), *_ = await router.choose_replicas(replicas, pending)
    router.on_request_routed(pending, chosen.replica_id, None)
    return chosen


async def test_the_routers_decisions_reach_the_ingresss_metrics_and_status() -> None:
    router = router_as_ray_builds_it()
    replicas = [Copy(ReplicaID("r1", DEPLOYMENT)), Copy(ReplicaID("r2", DEPLOYMENT))]
    prompt = "a system prompt that fills blocks " * 3
    first = await route(router, replicas, 1, prompt)  # nothing known yet: cold
    for n in range(2, 5):  # the same prompt: its blocks are on the first's copy
        assert (await route(router, replicas, n, prompt)).replica_id == first.replica_id
    await route(router, replicas, 5, "short")  # less than a block: by load alone
    comp = RayComponent(SPEC, None)
    assert comp.routing_decisions == {Decision.PREFIX: 3, Decision.SPILLED: 0, Decision.COLD: 2}
    text = await render_metrics(ray_backend([comp]))
    found = {f.name: f for f in text_string_to_metric_families(text.decode())}
    counts = {d.value: found[f"llmhost_endpoint_routed_{d.value}"].samples[0].value for d in Decision}
    assert counts == {"prefix": 3, "spilled": 0, "cold": 2}
