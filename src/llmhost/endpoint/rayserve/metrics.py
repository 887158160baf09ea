"""`/metrics` of a Ray endpoint: the ingress's own families (labelled by component, as the single-host
router's), every copy's llmhost metrics relabelled with `component` and `copy` (as the single-host
router's), then Ray Serve's `ray_serve_*` families as each node's Ray metrics agent exports them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from llmhost.endpoint.metrics import relabel, routing_families
from llmhost.endpoint.rayserve.relay import RayComponent

RAY_PREFIX = "ray_serve_"
SCRAPE_TIMEOUT_S = 3.0
STALE_S = 20.0  # a copy silent this long has gone (its pushes come every few seconds)


@dataclass(frozen=True)
class Pushed:
    """What a copy last sent the ingress: its /metrics, and its process's CPU time and RSS."""

    component: str
    text: str
    at: float  # monotonic, here
    cpu_s: float | None = None
    rss_mb: float | None = None


@dataclass
class CopyMetrics:
    """The last push of each copy, by copy."""

    latest: dict[str, Pushed] = field(default_factory=dict)

    def report(
        self, component: str, copy: str, text: str, cpu_s: float | None = None, rss_mb: float | None = None
    ) -> None:
        self.latest[copy] = Pushed(component, text, time.monotonic(), cpu_s, rss_mb)

    def fresh(self, live: set[str]) -> dict[str, Pushed]:
        """Those of copies Ray Serve still runs, fresh ones only (the others are forgotten)."""
        now = time.monotonic()
        for copy in [c for c, p in self.latest.items() if c not in live or now - p.at > STALE_S]:
            del self.latest[copy]
        return dict(self.latest)

    def families(self, live: set[str]) -> list[Metric]:
        """Those of copies Ray Serve still runs, fresh ones only, relabelled, merged by family."""
        merged: dict[str, Metric] = {}
        for copy, pushed in sorted(self.fresh(live).items()):
            try:
                families = list(text_string_to_metric_families(pushed.text))
            except ValueError:  # not the exposition format
                continue
            relabel(families, {"component": pushed.component, "copy": copy}, merged)
        return list(merged.values())


def ingress_families(components: Sequence[RayComponent]) -> list[Metric]:
    copies = GaugeMetricFamily(
        "llmhost_endpoint_copies",
        "Copies of each component by Ray Serve replica state",
        labels=["component", "state"],
    )
    target = GaugeMetricFamily(
        "llmhost_endpoint_copies_target",
        "Copies Ray Serve drives each component towards",
        labels=["component"],
    )
    in_flight = GaugeMetricFamily(
        "llmhost_endpoint_in_flight", "Requests at the ingress, waiting ones included", labels=["component"]
    )
    answered = CounterMetricFamily(
        "llmhost_endpoint_requests",
        "Requests answered by the ingress, by status",
        labels=["component", "code"],
    )
    retries = CounterMetricFamily(
        "llmhost_endpoint_retries", "Requests sent again because no copy had taken them", labels=["component"]
    )
    cut = CounterMetricFamily(
        "llmhost_endpoint_stream_errors", "Streams cut by a failing copy", labels=["component"]
    )
    for c in components:
        states = sorted({r.state for r in c.view.replicas} | {"RUNNING"})
        for state in states:
            copies.add_metric([c.name, state], sum(1 for r in c.view.replicas if r.state == state))
        target.add_metric([c.name], c.view.target)
        in_flight.add_metric([c.name], c.in_flight)
        for code, n in sorted(c.requests.items()):
            answered.add_metric([c.name, str(code)], n)
        retries.add_metric([c.name], c.retries)
        cut.add_metric([c.name], c.stream_errors)
    routing = routing_families([(c.name, c.spec.routing.policy, c.routing_decisions) for c in components])
    return [copies, target, in_flight, answered, retries, cut, *routing]


def node_metric_urls() -> list[str]:
    """Each alive node's Ray metrics agent (Prometheus text)."""
    import ray

    return [
        f"http://{n['NodeManagerAddress']}:{n['MetricsExportPort']}/metrics"
        for n in ray.nodes()
        if n.get("Alive") and n.get("MetricsExportPort")
    ]


async def _scrape(client: httpx.AsyncClient, url: str) -> list[Metric]:
    try:
        resp = await client.get(url, timeout=SCRAPE_TIMEOUT_S)
        families = list(text_string_to_metric_families(resp.text)) if resp.status_code == 200 else []
    except (httpx.HTTPError, ValueError):  # a node going away, or not the exposition format
        return []
    return [f for f in families if f.name.startswith(RAY_PREFIX)]


def merge(families: Iterable[Metric], into: dict[str, Metric]) -> None:
    """Families of the same name from several nodes become one family with all their samples."""
    for family in families:
        merged = into.get(family.name)
        if merged is None:
            merged = into[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
        merged.samples.extend(family.samples)


class _Snapshot(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


async def render_ray_metrics(
    components: Sequence[RayComponent],
    copies: CopyMetrics,
    urls: list[str],
    transport: httpx.AsyncBaseTransport | None = None,
    console: Iterable[Metric] = (),
) -> bytes:
    """`urls`: the nodes' metrics agents (`node_metric_urls`); `transport`: tests answer in-process;
    `console`: the console's families (its last period's figures)."""
    async with httpx.AsyncClient(transport=transport) as client:
        scraped = await asyncio.gather(*(_scrape(client, u) for u in urls))
    ray_families: dict[str, Metric] = {}
    for families in scraped:
        merge(families, ray_families)
    registry = CollectorRegistry(auto_describe=False)
    live = {r.copy for c in components for r in c.view.replicas}
    ours = ingress_families(components) + list(console) + copies.families(live)
    registry.register(_Snapshot(ours + list(ray_families.values())))
    return generate_latest(registry)
