"""`/metrics` of the endpoint, either back end: the front's own gauges and counters, then every copy's
metrics relabelled with `component` and `copy`, one family each, then the back end's foreign families
(Ray Serve's), all through prometheus_client (a collector relabels, `generate_latest` writes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from fastapi import APIRouter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector
from starlette.responses import Response

from llmhost.console.front import FAMILY as CONSOLE_FAMILY
from llmhost.endpoint import apidoc
from llmhost.endpoint.affinity import Decision
from llmhost.endpoint.control.component import ModelState
from llmhost.endpoint.control.replica import ReplicaState
from llmhost.endpoint.front import front_families
from llmhost.jobs.metrics import FAMILIES as JOBS_FAMILIES
from llmhost.process.lifecycle import asyncio_tasks

if TYPE_CHECKING:
    from llmhost.endpoint.backend import Backend
    from llmhost.endpoint.control.component import Component


def relabel(families: Iterable[Metric], labels: dict[str, str], into: dict[str, Metric]) -> None:
    """Add `labels` (first) to every sample of one copy's families, merged by family into `into`."""
    for family in families:
        merged = into.get(family.name)
        if merged is None:
            merged = into[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
        for s in family.samples:
            merged.add_sample(s.name, {**labels, **s.labels}, s.value, s.timestamp, s.exemplar)


def router_families(components: Sequence[Component]) -> list[Metric]:
    copies = GaugeMetricFamily(
        "llmhost_endpoint_copies", "Copies of each component by state", labels=["component", "state"]
    )
    outstanding = GaugeMetricFamily(
        "llmhost_endpoint_copy_outstanding", "Requests in flight on each copy", labels=["component", "copy"]
    )
    restarts = CounterMetricFamily(
        "llmhost_endpoint_copy_restarts", "Restarts of each copy", labels=["component", "copy"]
    )
    for c in components:
        for state in ReplicaState:
            copies.add_metric([c.name, state.value], sum(1 for r in c.replicas if r.state == state))
        for r in c.replicas:
            outstanding.add_metric([c.name, r.id], r.outstanding)
            restarts.add_metric([c.name, r.id], r.restarts)
    routing = routing_families([(c.name, c.spec.routing.policy, c.routing_decisions) for c in components])
    tasks = GaugeMetricFamily(
        "llmhost_endpoint_asyncio_tasks", "Tasks alive on the router's event loop", value=asyncio_tasks()
    )
    return [
        copies,
        *front_families(components),
        outstanding,
        restarts,
        *on_demand_families(components),
        *variant_families(components),
        *routing,
        tasks,
    ]


def on_demand_families(components: Sequence[Component]) -> list[Metric]:
    """Loads, unloads, evictions and load seconds of the on-demand models."""
    state = GaugeMetricFamily(
        "llmhost_endpoint_model_state", "On-demand models by state (1: in it)", labels=["component", "state"]
    )
    loads = CounterMetricFamily(
        "llmhost_endpoint_model_loads", "Loads of each on-demand model", labels=["component"]
    )
    seconds = SummaryMetricFamily(
        "llmhost_endpoint_model_load_seconds",
        "Seconds from a load's copy start to its first passed /ping",
        labels=["component"],
    )
    unloads = CounterMetricFamily(
        "llmhost_endpoint_model_unloads",
        "Unloads of each on-demand model by reason: idle, evicted, admin",
        labels=["component", "reason"],
    )
    evictions = CounterMetricFamily(
        "llmhost_endpoint_model_evictions",
        "Unloads to make room for another model, by what was short: max_loaded, memory, cpus",
        labels=["component", "reason"],
    )
    for c in components:
        d = c.demand
        if d is None:
            continue
        for s in ModelState:
            state.add_metric([c.name, s.value], 1.0 if c.state == s else 0.0)
        loads.add_metric([c.name], d.loads)
        seconds.add_metric([c.name], count_value=d.loads, sum_value=d.load_seconds)
        for reason, n in sorted(d.unloads.items()):
            unloads.add_metric([c.name, reason], n)
        for reason, n in sorted(d.evictions.items()):
            evictions.add_metric([c.name, reason], n)
    return [state, loads, seconds, unloads, evictions]


def variant_families(components: Sequence[Component]) -> list[Metric]:
    """The production variants' weights and requests, and what the shadow variants did."""
    labels = ["component", "variant"]
    weight = GaugeMetricFamily(
        "llmhost_endpoint_variant_weight",
        "Weight of each production variant (its share: weight / the component's weights together)",
        labels=labels,
    )
    routed = CounterMetricFamily(
        "llmhost_endpoint_variant_requests",
        "Requests sent to each production variant (by weight, or pinned by X-Amzn-SageMaker-Target-Variant)",
        labels=labels,
    )
    percent = GaugeMetricFamily(
        "llmhost_endpoint_shadow_percent",
        "Percent of the component's requests copied to each shadow variant",
        labels=labels,
    )
    copies = CounterMetricFamily(
        "llmhost_endpoint_shadow_requests",
        "Request copies of each shadow variant by outcome: answered (2xx), failed, dropped (its copies busy)",
        labels=[*labels, "outcome"],
    )
    latency = SummaryMetricFamily(
        "llmhost_endpoint_shadow_latency_seconds",
        "Seconds from a copy's sending to the last byte of the shadow variant's 2xx answer",
        labels=labels,
    )
    compared = CounterMetricFamily(
        "llmhost_endpoint_shadow_compared",
        "Shadow answers compared with the primary's (temperature 0, both 2xx, text read)",
        labels=labels,
    )
    matched = CounterMetricFamily(
        "llmhost_endpoint_shadow_matched",
        "Compared shadow answers whose output text was exactly the primary's (agreement: matched / compared)",
        labels=labels,
    )
    for c in components:
        for v in c.variants.variants if c.variants is not None else []:
            key = [c.name, v.name]
            if v.shadow is None:
                weight.add_metric(key, v.weight)
                routed.add_metric(key, v.routed)
                continue
            s = v.stats
            percent.add_metric(key, v.shadow)
            for outcome, n in (("answered", s.answered), ("failed", s.failed), ("dropped", s.dropped)):
                copies.add_metric([*key, outcome], n)
            latency.add_metric(key, count_value=s.answered, sum_value=s.latency_s)
            compared.add_metric(key, s.compared)
            matched.add_metric(key, s.matched)
    return [weight, routed, percent, copies, latency, compared, matched]


def routing_families(components: Sequence[tuple[str, str, Mapping[Decision, int] | None]]) -> list[Metric]:
    """Each component's routing policy, and with prefix-aware routing its decisions (`affinity.Decision`;
    None: another policy): prefix / (prefix + spilled) is the share of requests that reached the copy
    holding their prefix."""
    policy = GaugeMetricFamily(
        "llmhost_endpoint_routing_policy",
        "How the router picks a copy (1 for the policy in use)",
        labels=["component", "policy"],
    )
    helps = {
        Decision.PREFIX: "Requests sent to the copy holding the longest prefix of their prompt",
        Decision.SPILLED: (
            "Requests whose prefix's copy was over the load bound or unavailable: sent elsewhere"
        ),
        Decision.COLD: "Requests whose prompt no copy was known to hold: sent to the least outstanding copy",
    }
    counts = {
        d: CounterMetricFamily(f"llmhost_endpoint_routed_{d.value}", help, labels=["component"])
        for d, help in helps.items()
    }
    for name, used, decisions in components:
        policy.add_metric([name, used], 1)
        if decisions is not None:
            for d, family in counts.items():
                family.add_metric([name], decisions[d])
    return [policy, *counts.values()]


class _Snapshot(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


async def render_metrics(backend: Backend, extra: Sequence[Metric] = ()) -> bytes:
    """The front's families, `extra` (more of the front's own: the console's figures, the batch jobs'),
    every copy's relabelled with `component` and `copy`, then the back end's foreign families."""
    copies, foreign = await asyncio.gather(backend.copies(), backend.foreign_families())
    merged: dict[str, Metric] = {}
    for c in copies:
        if c.families is None:
            continue
        # a copy is a server with its own console and jobs: the endpoint's families of both are the ones shown
        own = [f for f in c.families if not f.name.startswith((CONSOLE_FAMILY, *JOBS_FAMILIES))]
        relabel(own, {"component": c.component, "copy": c.copy}, merged)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot([*backend.families(), *extra, *merged.values(), *foreign]))
    return generate_latest(registry)


def metrics_routes(backend: Backend, more: Callable[[], list[Metric]] = list) -> APIRouter:
    """GET /metrics; `more`: the front's other families (the console's figures, the batch jobs'...)."""
    router = APIRouter()

    @router.get("/metrics", openapi_extra=apidoc.METRICS)
    async def metrics() -> Response:
        text = await render_metrics(backend, more())
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    return router
