"""The single-host back end, as the console and /metrics read it (`endpoint.backend`): copies are processes
on this host, read over HTTP (/metrics) and through the OS (CPU time, RSS); the host's cores and memory
are the manager's ledger."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psutil
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from llmhost.console.capture import CaptureTally, capture_status
from llmhost.endpoint.admin import LOCAL_ONLY
from llmhost.endpoint.backend import CopyFigures, Served
from llmhost.endpoint.bodies import ComponentState
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.manager import EndpointManager
from llmhost.endpoint.control.replica import Replica, ReplicaState
from llmhost.endpoint.metrics import router_families

SCRAPE_TIMEOUT_S = 5.0
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


class LocalBackend:
    """`client` reaches the copies (it carries the endpoint's internal key)."""

    kind = "local"

    def __init__(self, manager: EndpointManager, client: httpx.AsyncClient) -> None:
        self.manager = manager
        self.client = client

    @property
    def started_at(self) -> float:
        return self.manager.started_at

    def served(self) -> list[Served]:
        return [Served(c, len(c.ready())) for c in self.manager.every()]

    async def copies(self) -> list[CopyFigures]:
        replicas = [(c, r) for c in self.manager.every() for r in c.replicas]
        scraped = await asyncio.gather(*(_scrape(self.client, r) for _, r in replicas))
        out = []
        for (comp, r), families in zip(replicas, scraped, strict=True):
            cpu_s, rss = process_figures(r.pid)
            reserved = r.alloc.share * len(r.alloc.cpus)
            out.append(
                CopyFigures(comp.name, r.id, r.key, families, cpu_s, rss, reserved, float(r.alloc.memory_mb))
            )
        return out

    def families(self) -> list[Metric]:
        return router_families(self.manager.every())

    async def foreign_families(self) -> list[Metric]:
        return []

    async def describe(self, local: bool, captured: CaptureTally) -> dict[str, Any]:
        status = self.manager.status()
        ledger = self.manager.ledger
        memory = psutil.virtual_memory()
        return {
            "name": status["name"],
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
                "why_not": None if local else LOCAL_ONLY,
                "add_remove": True,
                "scale_to_zero": True,
                "down": True,
            },
            "components": [
                _shown(comp, state, captured)
                for comp, state in zip(self.manager.every(), status["components"], strict=True)
            ],
            # the loading policy when some component is loaded on demand (each one's state is in its entry)
            "on_demand": (
                status["on_demand"] | {"models_dir": status["models_dir"]}
                if any(c["on_demand"] for c in status["components"])
                else None
            ),
        }


def _shown(comp: Component, state: ComponentState, captured: CaptureTally) -> dict[str, Any]:
    """A component as the page shows it: its status, and its copies' capture, filed under the name they
    serve (a component with variants has no copies: each variant shows its own)."""
    if comp.variants is not None:
        return dict(state)
    config = comp.spec.engine.capture(comp.served_name)
    return {**state, "capture": capture_status(config, captured.totals(comp.name))}
