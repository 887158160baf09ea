"""The loop that reads the figures every period and keeps the points, in the server (not in the page):
a console opened now shows the last 15 minutes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from llmhost.console.readings import ComponentReading, Differ
from llmhost.console.timeseries import SeriesStore

log = logging.getLogger("llmhost.console")

Reader = Callable[[], Awaitable[Mapping[str, ComponentReading]]]


class Sampler:
    def __init__(self, store: SeriesStore, read: Reader, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.read = read
        self.clock = clock
        self.differ = Differ()

    async def tick(self) -> None:
        readings = await self.read()
        now = self.clock()
        for name, point in self.differ.points(now, readings).items():
            self.store.record(name, point)
        self.store.forget_older(now)

    async def run(self) -> None:
        """Every period until cancelled; a failed reading is logged and the next one tried."""
        while True:
            started = time.monotonic()
            try:
                await self.tick()
            except Exception:
                log.exception("console: reading the figures failed")
            await asyncio.sleep(max(0.0, self.store.period_s - (time.monotonic() - started)))
