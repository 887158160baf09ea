"""`llmhost serve`'s console: one component (the served model) with one copy (this process). The sampler
reads this server's own metrics registry in-process (no HTTP, no request counted) and its front-door
tally; a lone server has no admin API, so the page shows no actions but the playground."""

from __future__ import annotations

import os
import time
from typing import Any

import psutil
from fastapi import Request
from typing_extensions import TypedDict

from llmhost import __version__
from llmhost.console.capture import CaptureStatus, CaptureTally, capture_status
from llmhost.console.front import FrontTally
from llmhost.console.readings import ComponentReading, CopyReading, capture_counts, engine_reading
from llmhost.server.serving.context import ServingContext
from llmhost.shared.jsontypes import JSONObject

COPY = "self"


class ServeCopyRow(TypedDict):
    """This process, in the console's copy row (None: what a lone server does not have)."""

    copy: str
    component: str
    state: str
    pid: int
    port: int
    cpus: list[int]
    cpu_share: float
    threads: int
    memory_mb: None
    max_memory_mb: None
    memory_limit: None
    rss_mb: float
    outstanding: int
    restarts: int
    last_reason: str | None
    ready_for_s: float


class ServeComponent(TypedDict):
    """The served model, as the console shows an endpoint's component."""

    name: str
    model: str
    num_cpus: int
    memory_mb: None
    copies: int
    ready: int
    in_flight: int
    waiting: int
    autoscaling: None
    decisions: list[JSONObject]  # a lone server never scales: always empty
    requests: dict[str, int]
    embeddings: bool
    # what the model reads: text, and what /v1/models' capabilities say its projector adds (vision, audio)
    modalities: list[str]
    replicas: list[ServeCopyRow]
    capture: CaptureStatus | None  # --capture-dir's (None: off)


class ServerConsole:
    def __init__(self, ctx: ServingContext, tally: FrontTally) -> None:
        self.ctx = ctx
        self.tally = tally
        self.process = psutil.Process()
        self.started_at = time.time()
        self.capture_config = ctx.settings.capture()
        self.capture = CaptureTally()

    def _cpus(self) -> list[int]:
        try:
            return sorted(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            return list(range(os.cpu_count() or 1))

    async def read(self) -> dict[str, ComponentReading]:
        with self.process.oneshot():
            cpu = self.process.cpu_times()
            rss = float(self.process.memory_info().rss) / 2**20
        families = list(self.ctx.metrics.registry.collect())
        engine = engine_reading(families)
        total_mb = float(psutil.virtual_memory().total) / 2**20  # no reservation: the host's memory
        cpus = float(len(self._cpus()))
        copy = CopyReading(COPY, engine, cpu.user + cpu.system, rss, cpus, total_mb, capture_counts(families))
        ready = 1 if self.ctx.model.ready else 0
        readings = {self.ctx.settings.model_name: ComponentReading(self.tally.reading(), (copy,), ready)}
        self.capture.add(readings)
        return readings

    def _component(self) -> ServeComponent:
        s = self.ctx.settings
        model = self.ctx.model
        stats = self.ctx.engine.stats() if self.ctx.embedder is None else None
        rss = round(float(self.process.memory_info().rss) / 2**20, 1)
        replica: ServeCopyRow = {
            "copy": COPY,
            "component": s.model_name,
            "state": "ready" if model.ready else model.state.value,
            "pid": os.getpid(),
            "port": s.port,
            "cpus": self._cpus(),
            "cpu_share": 1.0,
            "threads": s.engine.n_threads,
            "memory_mb": None,
            "max_memory_mb": None,
            "memory_limit": None,
            "rss_mb": rss,
            "outstanding": self.tally.in_flight,
            "restarts": 0,
            "last_reason": model.error,
            "ready_for_s": round(time.time() - self.started_at, 1),
        }
        return {
            "name": s.model_name,
            "model": str(s.model_path),
            "num_cpus": len(self._cpus()),
            "memory_mb": None,
            "copies": 1,
            "ready": 1 if model.ready else 0,
            "in_flight": self.tally.in_flight,
            "waiting": stats.waiting if stats is not None else 0,
            "autoscaling": None,
            "decisions": [],
            "requests": {str(k): v for k, v in sorted(self.tally.responses.items())},
            "embeddings": self.ctx.embedder is not None,
            "modalities": ["text", *self.ctx.input_capabilities()],
            "replicas": [replica],
            "capture": capture_status(self.capture_config, self.capture.totals(s.model_name)),
        }

    async def overview(self, request: Request) -> dict[str, Any]:
        memory = psutil.virtual_memory()
        cpus = self._cpus()
        return {
            "kind": "server",
            "name": self.ctx.settings.model_name,
            "version": __version__,
            "backend": "serve",
            "uptime_s": round(time.time() - self.started_at, 1),
            "auth": self.ctx.settings.api_keys.enabled,
            "host": {
                "cpus": psutil.cpu_count() or len(cpus),
                "copy_cpus": cpus,
                "router_cpus": [],
                "memory_mb": memory.total // 2**20,
                "memory_available_mb": memory.available // 2**20,
            },
            "admin": {
                "allowed": False,
                "why_not": (
                    "`llmhost serve` runs one copy and has no admin API: scale "
                    "and change components on an endpoint (`llmhost endpoint up`)"
                ),
            },
            "components": [self._component()],
            "on_demand": None,
        }
