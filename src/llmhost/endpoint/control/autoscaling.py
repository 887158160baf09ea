"""The autoscaler's loop: at every interval, or sooner when woken (a request waits for a copy, one
ended), the on-demand pool looks at its models, then each autoscaled component's observed load goes
through `autoscaler.decide` and a change of copies is started in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from llmhost.endpoint.control.autoscaler import Observation, decide
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.ondemand import ModelPool
from llmhost.endpoint.control.placement import Ledger, can_place

log = logging.getLogger("llmhost.endpoint")


class Scaled(Protocol):
    """What the loop asks of the endpoint's manager."""

    ledger: Ledger
    pool: ModelPool

    def every(self) -> list[Component]: ...  # the components, their variants' too

    @property
    def closing(self) -> bool: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...

    async def resize(self, comp: Component, desired: int) -> None: ...


def record_decision(comp: Component, copies: int, desired: int, reason: str) -> None:
    """Keep a decision that changes the copies or holds a change back (a cooldown); "on target" is kept
    once per run of it, not at every look."""
    last = comp.decisions[-1] if comp.decisions else None
    if last is not None and (last["copies"], last["desired"], last["reason"]) == (copies, desired, reason):
        return
    if desired == copies and reason == "on target" and last is None:
        return  # nothing has happened yet
    now = round(time.time(), 3)
    comp.decisions.append({"at": now, "copies": copies, "desired": desired, "reason": reason})


class AutoscaleLoop:
    def __init__(self, scaled: Scaled, interval_s: float) -> None:
        self.scaled = scaled
        self.interval_s = interval_s
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Look again now rather than at the next interval."""
        self._wake.set()

    async def run(self) -> None:
        while not self.scaled.closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            self.scaled.pool.tick()
            for comp in self.scaled.every():
                try:
                    self._autoscale(comp)
                except Exception:  # keep the loop alive whatever one component does
                    log.exception("autoscaling %s failed", comp.name)

    def _autoscale(self, comp: Component) -> None:
        policy = comp.spec.autoscaling
        if policy is None or comp.removing or comp.lock.locked():
            return
        copies = len(comp.capacity())
        obs = Observation(time.monotonic(), copies, comp.take_peak(), comp.waiting)
        decision = decide(policy, obs, comp.scaler)
        comp.scaler = decision.state
        record_decision(comp, copies, decision.desired, decision.reason)
        if decision.desired == copies:
            return
        if decision.desired > copies:
            more = [(comp.name, comp.spec.resources, decision.desired - copies)]
            reason = can_place(self.scaled.ledger, more)
            if reason is not None:
                log.warning("autoscaling %s to %d copies refused: %s", comp.name, decision.desired, reason)
                return
        log.info("autoscaling %s: %d -> %d copies (%s)", comp.name, copies, decision.desired, decision.reason)
        self.scaled.spawn(self.scaled.resize(comp, decision.desired))
