"""The interface under the endpoint's two back ends: the single-host one (copies are processes on this host,
`endpoint.control.backend`) and Ray's (copies Ray Serve places on a cluster, `endpoint.rayserve.backend`).
The console (`endpoint.console`) and /metrics (`endpoint.metrics.render_metrics`) are written once over
it; the admin API has its own (`endpoint.admin.AdminBackend`), and so do the adapters' routes
(`endpoint.adapters.admin.AdapterBackend`) and the data routes (`endpoint.dataplane.routing`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import Metric

from llmhost.console.capture import CaptureTally
from llmhost.endpoint.front import FrontCounters


@dataclass(frozen=True)
class Served:
    """A component at the front: its counters, and how many copies serve it now."""

    counters: FrontCounters
    ready: int


@dataclass(frozen=True)
class CopyFigures:
    """One copy as its back end last saw it."""

    component: str
    copy: str  # its id, the `copy` label of its /metrics families
    key: str  # its process: a restart is a new key (the console's points follow processes)
    families: list[Metric] | None  # its /metrics; None: not read this time (not serving, gone, garbage)
    cpu_s: float | None  # its process's CPU seconds so far; None: not known
    rss_mb: float | None
    cpus: float  # what it reserves
    memory_mb: float


class Backend(Protocol):
    @property
    def kind(self) -> str: ...  # the console's `backend`: local, ray

    @property
    def started_at(self) -> float: ...  # Unix seconds: the console's uptime counts from it

    def served(self) -> list[Served]:
        """Every component the front counts (a single-host endpoint's variants too)."""
        ...

    async def copies(self) -> list[CopyFigures]:
        """Every copy the back end runs, with its metrics and process figures as far as they are known."""
        ...

    def families(self) -> list[Metric]:
        """The front's own /metrics families (its counters, copies by state, routing...)."""
        ...

    async def foreign_families(self) -> list[Metric]:
        """Others' families /metrics shows as they come (Ray Serve's); none on a single host."""
        ...

    async def describe(self, local: bool, captured: CaptureTally) -> dict[str, Any]:
        """The console overview's back-end part: the endpoint's `name`, `host`, `admin` (its rules for a
        client that is `local` or not), `components` (with what their copies `captured`, where they
        capture), `on_demand`, and whatever else this back end says."""
        ...
