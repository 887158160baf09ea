"""What a Ray endpoint's /metrics (`endpoint.metrics.render_metrics`) reads under Ray: the copies' last
pushes, the ingress's own families (labelled by component, as the single-host router's), and Ray Serve's
`ray_serve_*` families as each node's Ray metrics agent exports them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import httpx
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from llmhost.endpoint.front import front_families
from llmhost.endpoint.metrics import routing_families
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
    for c in components:
        states = sorted({r.state for r in c.view.replicas} | {"RUNNING"})
        for state in states:
            copies.add_metric([c.name, state], sum(1 for r in c.view.replicas if r.state == state))
        target.add_metric([c.name], c.view.target)
    routing = routing_families([(c.name, c.spec.routing.policy, c.routing_decisions) for c in components])
    return [copies, target, *front_families(components), *routing]


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


async def node_families(urls: list[str], transport: httpx.AsyncBaseTransport | None = None) -> list[Metric]:
    """Ray Serve's families from the nodes' metrics agents at `urls` (`node_metric_urls`), merged;
    `transport`: tests answer in-process."""
    async with httpx.AsyncClient(transport=transport) as client:
        scraped = await asyncio.gather(*(_scrape(client, u) for u in urls))
    merged: dict[str, Metric] = {}
    for families in scraped:
        merge(families, merged)
    return list(merged.values())
