"""On-demand models: loaded when a request names one, unloaded when idle past its keep_alive or when
another needs the room.

The room is what declared components leave of the host's CPUs and memory (the placement ledger), within
`on_demand.max_loaded` and `on_demand.memory_budget_mb`. A load that does not fit first unloads the
least recently used idle, unpinned models (drained, never cut); when in-flight work holds the room it
waits for it, up to the model's max_wait_s, then the requests waiting for it get a 503 saying why. A
model that could not fit even on an empty budget is refused at once with a 400. One load per model runs
at a time, however many requests wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from llmhost.endpoint.control.component import Component, ModelState, Refusal
from llmhost.endpoint.control.placement import Ledger, can_place, release
from llmhost.endpoint.control.replica import Replica, ReplicaState
from llmhost.endpoint.spec import OnDemandPolicy

log = logging.getLogger("llmhost.endpoint")


class Host(Protocol):
    """What the pool asks of the endpoint's manager."""

    ledger: Ledger

    @property
    def components(self) -> Mapping[str, Component]: ...

    def start_copy(self, comp: Component) -> asyncio.Future[bool]: ...

    async def stop_copy(self, comp: Component, replica: Replica) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...


@dataclass(frozen=True)
class Shortage:
    kind: str  # what is short: max_loaded, memory or cpus (the eviction reason)
    message: str


class ModelPool:
    def __init__(self, host: Host, policy: OnDemandPolicy) -> None:
        self.host = host
        self.policy = policy
        self._room = asyncio.Lock()  # one eviction-and-placement decision at a time
        self._freed = asyncio.Event()  # a request left or a copy stopped: room may be free

    # --- the budget ------------------------------------------------------------------------------

    def _holding(self, exclude: Component | None = None) -> list[Component]:
        """On-demand components holding room (a copy starting, ready, restarting or draining)."""
        return [
            c
            for c in self.host.components.values()
            if c.demand is not None and c is not exclude and c.replicas
        ]

    def _short(self, comp: Component, ledger: Ledger, holding: list[Component]) -> Shortage | None:
        p, res = self.policy, comp.spec.resources
        if p.max_loaded is not None and len(holding) >= p.max_loaded:
            names = ", ".join(c.name for c in holding)
            return Shortage("max_loaded", f"max_loaded={p.max_loaded} models are loaded ({names})")
        used = sum(r.alloc.memory_mb for c in holding for r in c.replicas)
        if p.memory_budget_mb is not None and used + res.memory_mb > p.memory_budget_mb:
            return Shortage(
                "memory",
                f"needs memory_mb={res.memory_mb}, {p.memory_budget_mb - used} MB of "
                f"memory_budget_mb={p.memory_budget_mb} are free",
            )
        reason = can_place(ledger, [(comp.name, res, 1)])
        if reason is None:
            return None
        return Shortage("memory" if "memory_mb" in reason else "cpus", reason)

    def _without(self, victims: list[Component]) -> Ledger:
        scratch = self.host.ledger.copy()
        for c in victims:
            for r in c.replicas:
                release(scratch, r.alloc)
        return scratch

    def never_fits(self, comp: Component) -> str | None:
        """Why `comp` could not load even with every other on-demand model unloaded, else None."""
        shortage = self._short(comp, self._without(self._holding()), [])
        if shortage is None:
            return None
        short = shortage.message.replace("insufficient capacity: ", "")
        return f"model {comp.name!r} can never be loaded here: {short}, with no other on-demand model loaded"

    def _evictable(self, comp: Component) -> list[Component]:
        """Idle, unpinned models holding room, least recently used first: loaded, or restarting after a
        crash or missed pings with no request waiting (a load under way holds the lock)."""
        idle = [
            c
            for c in self._holding(comp)
            if c.demand is not None
            and not c.demand.spec.pinned
            and c.in_flight == 0
            and c.capacity()
            and not c.lock.locked()
        ]
        return sorted(idle, key=lambda c: c.demand.last_used if c.demand else 0.0)

    def plan(self, comp: Component) -> tuple[list[Component], Shortage | None]:
        """The models to unload so that `comp` fits (LRU first), or what keeps it out."""
        victims: list[Component] = []
        candidates = self._evictable(comp)
        while True:
            holding = [c for c in self._holding(comp) if c not in victims]
            shortage = self._short(comp, self._without(victims), holding)
            if shortage is None or not candidates:
                return victims, shortage
            victims.append(candidates.pop(0))

    def waiting_reason(self, comp: Component, shortage: Shortage) -> str:
        busy = [
            f"{c.name} ({'pinned' if c.demand and c.demand.spec.pinned else f'{c.in_flight} in flight'})"
            for c in self._holding(comp)
        ]
        held = f"; holding the room: {', '.join(busy)}" if busy else ""
        return f"waiting for room to load model {comp.name!r}: {shortage.message}{held}"

    # --- loading ---------------------------------------------------------------------------------

    def want(self, comp: Component) -> None:
        """A request waits for `comp`: start its load unless one runs (or refuse one that never fits)."""
        d = comp.demand
        if d is None or comp.removing or (d.loading is not None and not d.loading.done()):
            return
        if comp.capacity():  # loaded, or its copy restarting after a crash
            return
        never = self.never_fits(comp)
        if never is not None:
            d.refusal = Refusal(400, never, "insufficient_capacity")
            comp.notify()
            return
        d.refusal = None
        d.loading = self.host.spawn(self.load(comp))  # tracked: shutdown cancels it

    async def load(self, comp: Component) -> None:
        """Make room, start the copy, wait for it; a failure is set as the waiting requests' answer."""
        d = comp.demand
        assert d is not None
        async with comp.lock:
            if comp.capacity() or comp.removing:
                return
            first = await self._place(comp, time.monotonic() + comp.spec.max_wait_s)
            if first is None:
                return
            started = time.monotonic()
            ok = await first
            if ok:
                d.refusal = None
                d.loads += 1
                d.last_load_s = time.monotonic() - started
                d.load_seconds += d.last_load_s
                log.info("model %s loaded in %.2f s", comp.name, d.last_load_s)
                return
            replicas = list(comp.replicas)
            why = replicas[0].last_reason if replicas else "stopped"
            await asyncio.gather(*(self.host.stop_copy(comp, r) for r in replicas))
        self._refuse(comp, Refusal(503, f"model {comp.name!r} failed to load: {why}", "service_unavailable"))

    async def _place(self, comp: Component, deadline: float) -> asyncio.Future[bool] | None:
        """Evict what must go and start the copy, or wait for room until `deadline` (then refuse)."""
        while True:
            async with self._room:
                victims, shortage = self.plan(comp)
                if shortage is None:
                    kind = self._short(comp, self.host.ledger, self._holding(comp))
                    await asyncio.gather(*(self.unload(v, "evicted", hold=False) for v in victims))
                    for v in victims:
                        if v.demand is not None and kind is not None:
                            v.demand.evictions[kind.kind] += 1
                    return self.host.start_copy(comp)
                why = self.waiting_reason(comp, shortage)
            left = deadline - time.monotonic()
            if left <= 0:
                self._refuse(
                    comp,
                    Refusal(
                        503,
                        f"{why}; gave up after max_wait_s={comp.spec.max_wait_s:g}",
                        "service_unavailable",
                    ),
                )
                return None
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), min(left, 1.0))

    def _refuse(self, comp: Component, refusal: Refusal) -> None:
        assert comp.demand is not None
        log.warning("%s", refusal.message)
        comp.demand.refusal = refusal
        comp.notify()

    # --- unloading -------------------------------------------------------------------------------

    async def unload(
        self, comp: Component, reason: str, hold: bool = True, still: Callable[[], bool] | None = None
    ) -> bool:
        """Drain and stop the model's copy (requests in flight finish first); False: none was loaded.
        `hold`: take the component's lock (an eviction runs under the pool's room lock instead);
        `still`: checked once the lock is held, the unload is dropped when it says no."""
        d = comp.demand
        assert d is not None
        async with comp.lock if hold else contextlib.nullcontext():
            victims = [r for r in comp.replicas if r.counts_as_capacity]
            if not victims or (still is not None and not still()):
                return False
            for r in victims:
                r.state = ReplicaState.DRAINING  # out of routing at once; stop() drains
            log.info("unloading model %s (%s)", comp.name, reason)
            await asyncio.gather(*(self.host.stop_copy(comp, r) for r in victims))
        d.unloads[reason] += 1
        d.request_keep_alive = None
        self.freed()
        return True

    def freed(self) -> None:
        self._freed.set()

    @staticmethod
    def idle_past_keep_alive(c: Component, now: float) -> bool:
        d = c.demand
        if d is None or d.spec.pinned or c.state != ModelState.LOADED:
            return False
        return d.keep_alive >= 0 and c.in_flight == 0 and c.idle_for(now) >= d.keep_alive

    def expired(self, now: float) -> list[Component]:
        """Loaded, unpinned models idle past their keep_alive, no load or unload of theirs under way."""
        return [
            c
            for c in self.host.components.values()
            if not c.lock.locked() and self.idle_past_keep_alive(c, now)
        ]

    def tick(self) -> None:
        """Unload the models idle past their keep_alive (the autoscaler loop calls this)."""
        for comp in self.expired(time.monotonic()):
            self.host.spawn(self._unload_idle(comp))

    async def _unload_idle(self, comp: Component) -> None:
        # a request may have come between the decision and the lock: then it stays
        await self.unload(comp, "idle", still=lambda: self.idle_past_keep_alive(comp, time.monotonic()))
