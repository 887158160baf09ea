"""The endpoint's console, the same over either back end: what the sampler reads each period (the front's
counters, each copy's /metrics, CPU time and RSS) and what the page shows beside the charts (the
endpoint, its host or cluster, components, copies and what scaled them)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from fastapi import Request

from llmhost import __version__
from llmhost.console.capture import CaptureTally
from llmhost.console.readings import ComponentReading, CopyReading, capture_counts, engine_reading
from llmhost.endpoint.admin import LOOPBACK
from llmhost.endpoint.backend import Backend, CopyFigures, Served


def readings(served: Sequence[Served], copies: Sequence[CopyFigures]) -> dict[str, ComponentReading]:
    """Each component's reading: the front's counters, and each of its copies' figures."""
    by_component: dict[str, list[CopyReading]] = {s.counters.name: [] for s in served}
    for c in copies:
        engine = engine_reading(c.families) if c.families is not None else None
        captured = capture_counts(c.families) if c.families is not None else None
        reading = CopyReading(c.key, engine, c.cpu_s, c.rss_mb, c.cpus, c.memory_mb, captured)
        by_component.setdefault(c.component, []).append(reading)
    return {
        s.counters.name: ComponentReading(s.counters.reading(), tuple(by_component[s.counters.name]), s.ready)
        for s in served
    }


class EndpointConsole:
    """`auth`: whether the endpoint asks for an API key (the page says so)."""

    def __init__(self, backend: Backend, auth: bool) -> None:
        self.backend = backend
        self.auth = auth
        self.capture = CaptureTally()

    async def read(self) -> dict[str, ComponentReading]:
        out = readings(self.backend.served(), await self.backend.copies())
        self.capture.add(out)
        return out

    async def overview(self, request: Request) -> dict[str, Any]:
        local = (request.client.host if request.client else "") in LOOPBACK
        return {
            "kind": "endpoint",
            "version": __version__,
            "backend": self.backend.kind,
            "uptime_s": round(time.time() - self.backend.started_at, 1),
            "auth": self.auth,
            **await self.backend.describe(local, self.capture),
        }
