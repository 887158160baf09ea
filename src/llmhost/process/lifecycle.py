"""The life of a serving process (one replica, or an endpoint's router): serving, draining on
SIGTERM, exiting.

SageMaker (and systemd, and `llmhost endpoint` for its copies) send SIGTERM and SIGKILL 30 s later. On
the first signal /ping turns 503 and new requests get 503 + Retry-After at once, while requests in
flight finish within the grace period; then the process exits 0. A fatal fault (a dead engine) exits 1
so that the supervisor replaces the process.

Imports no engine: the endpoint's router uses it too and never loads llama.cpp.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from types import FrameType

import uvicorn

log = logging.getLogger("llmhost.server")

# SageMaker kills the container 30 s after SIGTERM: finish before that
DEFAULT_GRACE_S = 25.0
WATCH_INTERVAL_S = 0.2
# after requests are cut at the end of a drain, time for their error events to be written
CUT_FLUSH_S = 0.5
# how long `llmhost serve` keeps an idle connection open (uvicorn's timeout_keep_alive); a client pooling
# connections to it (the endpoint router) must drop them sooner, or it reuses one the server is closing
KEEP_ALIVE_S = 5


class Phase(enum.Enum):
    SERVING = "serving"  # taking requests (or loading: /ping tells which)
    DRAINING = "draining"  # signalled: new requests refused, those in flight finishing
    EXITING = "exiting"  # asked the HTTP server to stop; exit_code says how


class Lifecycle:
    """Shared by the app (which refuses requests while draining) and the process runner (which
    stops the HTTP server when asked through `on_exit`)."""

    def __init__(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        if not grace_s >= 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s}")
        self.grace_s = grace_s
        self.phase = Phase.SERVING
        self.exit_code = 0
        self.reason = ""
        self._drain_started = 0.0
        self.on_exit: Callable[[], None] | None = None

    @property
    def accepting(self) -> bool:
        return self.phase is Phase.SERVING

    def drain(self, reason: str) -> None:
        if self.phase is Phase.SERVING:
            log.info("%s: draining (up to %g s for requests in flight)", reason, self.grace_s)
            self.phase = Phase.DRAINING
            self.reason = reason
            self._drain_started = time.monotonic()

    def exit(self, code: int, reason: str) -> None:
        if self.phase is Phase.EXITING:
            return
        log.log(logging.ERROR if code else logging.INFO, "exiting (%d): %s", code, reason)
        self.phase, self.exit_code, self.reason = Phase.EXITING, code, reason
        if self.on_exit is not None:
            self.on_exit()

    def drained(self, in_flight: int) -> bool:
        """Draining and nothing left in flight, or the grace period is over."""
        if self.phase is not Phase.DRAINING:
            return False
        over = time.monotonic() - self._drain_started >= self.grace_s
        if over and in_flight:
            log.warning("grace period of %g s over with %d request(s) in flight", self.grace_s, in_flight)
        return over or in_flight == 0


async def watch(
    lifecycle: Lifecycle,
    in_flight: Callable[[], int],
    fatal: Callable[[], str | None] = lambda: None,
    also: Callable[[], None] = lambda: None,
    cut: Callable[[str], int] | None = None,
) -> None:
    """Until cancelled: exit 1 once `fatal` names a reason, exit 0 once a drain is over; `also` runs
    at every look (e.g. a slow-step check). `cut` ends the requests still in flight when the grace period
    is over, each with its API's error event, before the server closes their connections."""
    while True:
        await asyncio.sleep(WATCH_INTERVAL_S)
        reason = fatal()
        if reason is not None:
            lifecycle.exit(1, reason)
        elif lifecycle.drained(in_flight()):
            if cut is not None and in_flight():
                cut(f"the server is shutting down: its grace period of {lifecycle.grace_s:g} s is over")
                # let the streams write their error events before the server stops
                await asyncio.sleep(CUT_FLUSH_S)
            lifecycle.exit(0, f"drained after {lifecycle.reason}")
        also()


def asyncio_tasks() -> int:
    """Tasks alive on this thread's event loop (a soak watches it for leaks); 0 without a running loop."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return 0


class GracefulServer(uvicorn.Server):
    """uvicorn, with the first SIGTERM/SIGINT starting a drain instead of stopping at once, and no
    re-raised signal afterwards (the exit status is the lifecycle's). A second signal stops now."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        lifecycle.on_exit = self._stop

    def _stop(self) -> None:
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.lifecycle.accepting:
            self.lifecycle.drain(f"signal {sig}")
        else:
            self.should_exit = True
            self.force_exit = self.lifecycle.phase is Phase.EXITING
