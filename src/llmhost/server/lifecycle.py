"""The engine's part in the server process's life: exit when it dies, log steps that run too long."""

from __future__ import annotations

import logging

from llmhost.engine import AsyncEngine
from llmhost.engine.embedder_loop import AsyncEmbedder
from llmhost.engine.worker import EngineState
from llmhost.process.lifecycle import Lifecycle, watch

log = logging.getLogger("llmhost.server")


class SlowStepLog:
    """Logs a step running longer than `slow_step_s`, again each further `slow_step_s`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.reported = 0.0

    def __call__(self) -> None:
        slow = self.engine.slow_step()
        if slow is None:
            self.reported = 0.0
            return
        limit = self.engine.config.slow_step_s
        if slow[0] - self.reported >= limit:
            self.reported = slow[0]
            log.warning("an engine step has run %.1f s (slow_step_s=%g): %s", slow[0], limit, slow[1])


def load_failed(path: str, error: str | None) -> str:
    """Why the process exits: the model file and the reason."""
    error = error or "unknown error"
    return f"model load failed: {error if path in error else f'{path}: {error}'}"


async def watch_engine(engine: AsyncEngine, lifecycle: Lifecycle) -> None:
    def fatal() -> str | None:
        if engine.state is EngineState.FAILED:  # a supervisor restarts or reports a process that exits
            return load_failed(engine.model_path, engine.error)
        return f"engine dead: {engine.error}" if engine.dead else None

    await watch(lifecycle, lambda: engine.in_flight, fatal, SlowStepLog(engine), cut=engine.cut)


async def watch_embedder(embedder: AsyncEmbedder, lifecycle: Lifecycle) -> None:
    def fatal() -> str | None:
        if embedder.state is EngineState.FAILED:
            return load_failed(embedder.model_path, embedder.error)
        return f"embedder dead: {embedder.error}" if embedder.dead else None

    await watch(lifecycle, lambda: embedder.in_flight, fatal)
