"""The Ray back end, as the console and /metrics read it (`endpoint.backend`): copies are Ray Serve
replicas that push their metrics, CPU time and RSS to the ingress (a handle cannot address one copy);
the cluster's resources are Ray's logical ones; Ray Serve's own families come from the nodes' agents."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.core import Metric

from llmhost.console.capture import CaptureTally
from llmhost.endpoint.backend import CopyFigures, Served
from llmhost.endpoint.rayserve import status
from llmhost.endpoint.rayserve.admin import RayAdmin
from llmhost.endpoint.rayserve.console import (
    UNKNOWN,
    ClusterFigures,
    admin_block,
    component_block,
    copy_figures,
    host,
)
from llmhost.endpoint.rayserve.metrics import (
    CopyMetrics,
    Pushed,
    ingress_families,
    node_families,
    node_metric_urls,
)


class RayBackend:
    """`details`: Ray Serve's last details the ingress read (its poller reads them every second);
    `cluster`: the cluster's figures and `urls` the nodes' metrics agents (both blocking, called off the
    event loop); `transport`: how the agents are reached (tests answer in-process)."""

    kind = "ray"

    def __init__(
        self,
        admin: RayAdmin,
        pushes: CopyMetrics,
        details: Callable[[], dict[str, Any]],
        cluster: Callable[[], ClusterFigures],
        urls: Callable[[], list[str]] = node_metric_urls,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.admin = admin
        self.pushes = pushes
        self.details = details
        self.cluster = cluster
        self.urls = urls
        self.transport = transport
        self.started_at = time.time()  # the ingress's: Ray starts it again, with no points, if it dies

    def _pushed(self) -> dict[str, Pushed]:
        live = {r.copy for c in self.admin.components.values() for r in c.view.replicas}
        return self.pushes.fresh(live)

    def served(self) -> list[Served]:
        return [Served(c, c.view.running) for c in self.admin.components.values()]

    async def copies(self) -> list[CopyFigures]:
        return copy_figures(self.admin.components, self._pushed())

    def families(self) -> list[Metric]:
        return ingress_families(list(self.admin.components.values()))

    async def foreign_families(self) -> list[Metric]:
        urls = await asyncio.to_thread(self.urls)
        return await node_families(urls, self.transport)

    async def describe(self, local: bool, captured: CaptureTally) -> dict[str, Any]:
        """A Ray component's entry carries no capture line (`captured` serves the single-host back end)."""
        cluster = await asyncio.to_thread(self.cluster)
        details = self.details()
        spec = self.admin.spec
        app = status.application(details, spec.name) or {}
        now = time.time()
        pushed = self._pushed()
        entries = self.admin.snapshot(details)["components"]
        comps = [
            component_block(c, entry, pushed, now)
            for c, entry in zip(self.admin.components.values(), entries, strict=True)
        ]
        return {
            "name": spec.name,
            "status": app.get("status", ""),
            "message": app.get("message", ""),
            "host": host(cluster, spec.router.num_cpus),
            "admin": admin_block(local),
            "components": comps,
            "on_demand": None,
            "unknown": list(UNKNOWN),
        }
