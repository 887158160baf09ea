"""The single-host endpoint's console: what the sampler reads each period (the router's own counters,
each running copy's /metrics and its process's CPU time and RSS) and what the page shows beside the
charts (the endpoint, its host, components, copies and the autoscaler's decisions)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import psutil
from fastapi import Request
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from llmhost import __version__
from llmhost.console.capture import CaptureTally, capture_status
from llmhost.console.readings import (
    ComponentReading,
    CopyReading,
    FrontReading,
    capture_counts,
    engine_reading,
)
from llmhost.endpoint.admin import LOOPBACK
from llmhost.endpoint.bodies import ComponentState
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.manager import EndpointManager
from llmhost.endpoint.control.replica import Replica, ReplicaState

SCRAPE_TIMEOUT_S = 2.0
SCRAPED = (ReplicaState.READY, ReplicaState.DRAINING)


def process_figures(pid: int | None) -> tuple[float | None, float | None]:
    """CPU seconds used so far and RSS (MB) of a copy's process; None where it is not running."""
    if pid is None:
        return None, None
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            cpu = proc.cpu_times()
            return cpu.user + cpu.system, float(proc.memory_info().rss) / 2**20
    except psutil.Error:
        return None, None


async def _scrape(client: httpx.AsyncClient, replica: Replica) -> list[Metric] | None:
    """A copy's metric families; None: not read this time."""
    if replica.state not in SCRAPED:
        return None
    try:
        resp = await client.get(f"{replica.url}/metrics", timeout=SCRAPE_TIMEOUT_S)
        if resp.status_code != 200:
            return None
        return list(text_string_to_metric_families(resp.text))
    except (httpx.HTTPError, ValueError):  # gone meanwhile, or not the exposition format
        return None


class EndpointConsole:
    """`client` reaches the copies (it carries the endpoint's internal key)."""

    def __init__(self, manager: EndpointManager, client: httpx.AsyncClient, auth: bool) -> None:
        self.manager = manager
        self.client = client
        self.auth = auth
        self.capture = CaptureTally()

    async def read(self) -> dict[str, ComponentReading]:
        comps = self.manager.every()
        replicas = [(c, r) for c in comps for r in c.replicas]
        scraped = await asyncio.gather(*(_scrape(self.client, r) for _, r in replicas))
        copies: dict[str, list[CopyReading]] = {c.name: [] for c in comps}
        for (comp, r), families in zip(replicas, scraped, strict=True):
            cpu_s, rss = process_figures(r.pid)
            reserved = r.alloc.share * len(r.alloc.cpus)
            engine = engine_reading(families) if families is not None else None
            captured = capture_counts(families) if families is not None else None
            reading = CopyReading(r.key, engine, cpu_s, rss, reserved, float(r.alloc.memory_mb), captured)
            copies[comp.name].append(reading)
        readings = {
            c.name: ComponentReading(self.front(c), tuple(copies[c.name]), len(c.ready())) for c in comps
        }
        self.capture.add(readings)
        return readings

    def _shown(self, comp: Component, state: ComponentState) -> dict[str, Any]:
        """A component as the page shows it: its status, and its copies' capture, filed under the name
        they serve (a component with variants has no copies: each variant shows its own)."""
        if comp.variants is not None:
            return dict(state)
        config = comp.spec.engine.capture(comp.served_name)
        return {**state, "capture": capture_status(config, self.capture.totals(comp.name))}

    @staticmethod
    def front(comp: Component) -> FrontReading:
        return FrontReading(
            responses=dict(comp.requests),
            no_capacity=comp.no_capacity,
            timed=comp.timed,
            latency_s=comp.latency_s,
            model_latency_s=comp.model_latency_s,
            in_flight=comp.in_flight,
            waiting=comp.waiting,
        )

    async def overview(self, request: Request) -> dict[str, Any]:
        status = self.manager.status()
        ledger = self.manager.ledger
        memory = psutil.virtual_memory()
        local = (request.client.host if request.client else "") in LOOPBACK
        return {
            "kind": "endpoint",
            "name": status["name"],
            "version": __version__,
            "backend": "local",
            "uptime_s": round(time.time() - self.manager.started_at, 1),
            "auth": self.auth,
            "host": {
                "cpus": psutil.cpu_count() or len(ledger.cpus),
                "copy_cpus": ledger.cpus,
                "router_cpus": self.manager.router_cpus,
                "cpus_reserved": round(sum(ledger.used.values()), 3),
                "cpus_free": round(ledger.free_share(), 3),
                "memory_mb": memory.total // 2**20,
                "memory_available_mb": memory.available // 2**20,
                "memory_reservable_mb": ledger.memory_mb,
                "memory_reserved_mb": ledger.reserved_mb,
                "memory_free_mb": ledger.free_memory_mb,
            },
            # the admin API's own rule: local clients only; components can be added and removed here
            "admin": {
                "allowed": local,
                "why_not": None if local else "the admin API answers local clients only",
                "add_remove": True,
                "scale_to_zero": True,
                "down": True,
            },
            "components": [
                self._shown(comp, state)
                for comp, state in zip(self.manager.every(), status["components"], strict=True)
            ],
            # the loading policy when some component is loaded on demand (each one's state is in its entry)
            "on_demand": (
                status["on_demand"] | {"models_dir": status["models_dir"]}
                if any(c["on_demand"] for c in status["components"])
                else None
            ),
        }
