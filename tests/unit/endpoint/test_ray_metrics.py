"""`/metrics` of a Ray endpoint (no Ray needed): the ingress's families, the copies' pushed metrics
relabelled, and the nodes' `ray_serve_*` families merged, with nodes failing or going away."""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmhost.bench.load.server_metrics import summarize_scrapes
from llmhost.endpoint.affinity import RAY_ROUTERS, Affinity, Decision
from llmhost.endpoint.metrics import render_metrics
from llmhost.endpoint.rayserve.metrics import (
    STALE_S,
    CopyMetrics,
    Pushed,
    ingress_families,
)
from llmhost.endpoint.rayserve.relay import RayComponent
from llmhost.endpoint.rayserve.status import DeploymentView, Replica
from llmhost.endpoint.spec import ComponentSpec
from tests.unit.endpoint.ray_fakes import ray_backend

COPY_TEXT = "# TYPE llmhost_num_requests_running gauge\nllmhost_num_requests_running 2\n"
NODE_TEXT = """# TYPE ray_serve_replica_processing_queries gauge
ray_serve_replica_processing_queries{{replica="{r}"}} 1
# TYPE ray_node_cpu_utilization gauge
ray_node_cpu_utilization 50
"""


def comp(name: str, *replicas: tuple[str, str], policy: str = "least_outstanding") -> RayComponent:
    c = RayComponent(ComponentSpec(name=name, routing={"policy": policy}), None)
    views = tuple(Replica(copy, state, "n", "ip", 1, "x") for copy, state in replicas)
    c.view = DeploymentView(True, "HEALTHY", "", len(replicas), views)
    return c


def samples(text: bytes, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    found = {f.name: f for f in text_string_to_metric_families(text.decode())}
    if family not in found:
        return {}
    return {tuple(sorted(s.labels.items())): s.value for s in found[family].samples}


async def test_copies_metrics_are_those_of_live_fresh_copies_relabelled() -> None:
    copies = CopyMetrics()
    copies.report("a", "a-1", COPY_TEXT)
    copies.report("a", "a-2", COPY_TEXT)  # Ray no longer runs it
    copies.report("b", "b-1", "not the exposition format {")
    copies.report("b", "b-2", COPY_TEXT)
    copies.latest["b-2"] = Pushed("b", COPY_TEXT, time.monotonic() - STALE_S - 1)  # silent too long
    a, b = comp("a", ("a-1", "RUNNING")), comp("b", ("b-1", "RUNNING"), ("b-2", "RUNNING"))
    text = await render_metrics(ray_backend([a, b], copies))
    assert samples(text, "llmhost_num_requests_running") == {(("component", "a"), ("copy", "a-1")): 2.0}
    assert set(copies.latest) == {"a-1", "b-1"}


def test_the_ingress_counts_copies_by_state_and_answers_by_status() -> None:
    a = comp("a", ("a-1", "RUNNING"), ("a-2", "STARTING"))
    a.requests[200] += 3
    a.requests[503] += 1
    a.retries, a.stream_errors, a.in_flight = 2, 1, 4
    families = {f.name: f for f in ingress_families([a])}
    copies = {s.labels["state"]: s.value for s in families["llmhost_endpoint_copies"].samples}
    assert copies == {"RUNNING": 1, "STARTING": 1}
    answered = {s.labels["code"]: s.value for s in families["llmhost_endpoint_requests"].samples}
    assert answered == {"200": 3, "503": 1}
    assert families["llmhost_endpoint_retries"].samples[0].value == 2
    assert families["llmhost_endpoint_in_flight"].samples[0].value == 4


async def test_nodes_ray_serve_families_merge_and_failing_nodes_are_left_out() -> None:
    def node(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host == "down":
            raise httpx.ConnectError("refused", request=request)
        if host == "sick":
            return httpx.Response(500, text="oops")
        return httpx.Response(200, text=NODE_TEXT.format(r=host))

    urls = [f"http://{h}:8080/metrics" for h in ("n1", "n2", "down", "sick")]
    copies = CopyMetrics()
    copies.report("a", "a-1", COPY_TEXT)
    a = comp("a", ("a-1", "RUNNING"))
    text = await render_metrics(ray_backend([a], copies, tuple(urls), httpx.MockTransport(node)))
    assert samples(text, "ray_serve_replica_processing_queries") == {
        (("replica", "n1"),): 1.0,
        (("replica", "n2"),): 1.0,
    }
    assert samples(text, "ray_node_cpu_utilization") == {}  # Ray Serve's families only
    assert samples(text, "llmhost_num_requests_running") == {(("component", "a"), ("copy", "a-1")): 2.0}
    assert samples(text, "llmhost_endpoint_copies_target") == {(("component", "a"),): 1.0}


def routed(text: bytes, component: str) -> dict[str, float]:
    return {
        d.value: v
        for d in Decision
        for labels, v in samples(text, f"llmhost_endpoint_routed_{d.value}").items()
        if labels == (("component", component),)
    }


async def test_prefix_routing_decisions_are_counted_from_zero_before_ray_builds_the_router(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray builds the handle's request router on its first request: a scrape before it has the counters
    at zero, so a bench's rate over the level (before, after) has its figure."""
    monkeypatch.delitem(RAY_ROUTERS, "p", raising=False)
    p, other = comp("p", ("p-1", "RUNNING"), policy="prefix"), comp("o", ("o-1", "RUNNING"))
    before = await render_metrics(ray_backend([p, other]))
    assert routed(before, "p") == {"prefix": 0, "spilled": 0, "cold": 0}
    assert routed(before, "o") == {}  # Ray Serve's own routing decides: nothing of ours to count
    assert samples(before, "llmhost_endpoint_routing_policy") == {
        (("component", "o"), ("policy", "least_outstanding")): 1.0,
        (("component", "p"), ("policy", "prefix")): 1.0,
    }
    affinity = Affinity()  # as the router registers it, in this process, on the first request
    monkeypatch.setitem(RAY_ROUTERS, "p", affinity)
    for d in (Decision.COLD, Decision.PREFIX, Decision.PREFIX, Decision.PREFIX, Decision.SPILLED):
        affinity.routed([], "p-1", d)
    after = await render_metrics(ray_backend([p, other]))
    assert routed(after, "p") == {"prefix": 3, "spilled": 1, "cold": 1}
    figures, _ = summarize_scrapes(before.decode(), [], after.decode())
    assert figures["server_routed_by_prefix"] == 3 / 4
    assert p.routing_decisions == {"prefix": 3, "spilled": 1, "cold": 1} and other.routing_decisions is None
