"""Shadow variants: a copy of a request sent in the background to one of a shadow variant's copies, its
answer read whole and dropped, its latency counted and its output text compared with the primary's
(requests at temperature 0 only: others may differ by chance).

A copy never delays nor fails the primary's answer: it is sent from a task of its own, and one that
would wait (every sequence of the shadow's ready copies busy, or none ready) is dropped and counted."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import httpx

from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.replica import Replica
from llmhost.endpoint.control.variants import Variant
from llmhost.endpoint.dataplane.answer_text import answer_text

log = logging.getLogger("llmhost.endpoint")

# how long a shadow's answer waits for the primary's to end before it is left uncompared
PRIMARY_WAIT_S = 600.0


@dataclass(frozen=True)
class Answer:
    """An answer as the client got it (`body` None: not read whole, e.g. the client left mid-stream)."""

    status: int
    content_type: str
    body: bytes | None


@dataclass(frozen=True)
class Copied:
    """A request as a shadow copy sends it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    greedy: bool  # compared with the primary's answer


def room(variant: Variant[Component]) -> bool:
    """Whether its ready copies have a free sequence: a shadow copy never queues behind another."""
    comp = variant.component
    return comp.in_flight < len(comp.ready()) * comp.spec.concurrent_per_copy


class Shadows:
    """The copies in flight, so that they can be cancelled when the router stops."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self._tasks: set[asyncio.Task[None]] = set()

    def send(
        self, variants: list[Variant[Component]], copied: Copied, primary: asyncio.Future[Answer | None]
    ) -> int:
        """Send `copied` to each of `variants` that has room (the others count it dropped); how many
        were sent."""
        sent = 0
        for v in variants:
            replica = v.component.pick() if room(v) else None
            if replica is None:
                v.stats.dropped += 1
                continue
            v.component.enter()
            replica.outstanding += 1
            replica.served += 1
            v.stats.sent += 1
            v.stats.in_flight += 1
            task = asyncio.create_task(self._copy(v, replica, copied, primary), name="shadow copy")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            sent += 1
        return sent

    async def _copy(
        self, v: Variant[Component], replica: Replica, copied: Copied, primary: asyncio.Future[Answer | None]
    ) -> None:
        try:
            await self._answer(v, replica, copied, primary)
        finally:
            v.stats.in_flight -= 1

    async def _answer(
        self, v: Variant[Component], replica: Replica, copied: Copied, primary: asyncio.Future[Answer | None]
    ) -> None:
        comp, stats = v.component, v.stats
        started = time.monotonic()
        status = 0
        try:
            request = self.client.build_request(
                copied.method, replica.url + copied.path, content=copied.body, headers=copied.headers
            )
            response = await self.client.send(request, stream=True)
            try:
                body = await response.aread()
            finally:
                await response.aclose()
            status = response.status_code
        except httpx.HTTPError as exc:
            replica.poke()
            log.info("shadow copy to %s failed: %s: %s", replica.id, type(exc).__name__, exc)
            body = b""
        finally:
            replica.outstanding -= 1
            comp.leave()
        elapsed = time.monotonic() - started
        comp.requests[status or 502] += 1
        if not 200 <= status < 300:
            stats.failed += 1
            return
        stats.answered += 1
        stats.latency_s += elapsed
        comp.timed_answer(elapsed, elapsed)
        if copied.greedy:
            await self._compare(v, response.headers.get("content-type", ""), body, primary)

    @staticmethod
    async def _compare(
        v: Variant[Component], content_type: str, body: bytes, primary: asyncio.Future[Answer | None]
    ) -> None:
        try:
            first = await asyncio.wait_for(asyncio.shield(primary), PRIMARY_WAIT_S)
        except TimeoutError:
            return
        if first is None or first.body is None or not 200 <= first.status < 300:
            return
        theirs, ours = answer_text(first.body, first.content_type), answer_text(body, content_type)
        if theirs is None or ours is None:
            return
        v.stats.compared += 1
        v.stats.matched += theirs == ours

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
