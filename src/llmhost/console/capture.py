"""A component's data capture as the console shows it: where its copies capture, how much of what, and
the lines they wrote and dropped, summed over its copies from the counters the sampler reads each period.
The sums count what copies since gone or restarted wrote too: their lines are in the destination."""

from __future__ import annotations

from collections.abc import Mapping

from typing_extensions import TypedDict

from llmhost.console.readings import CaptureCounts, ComponentReading
from llmhost.web.capture.config import CaptureConfig


class CaptureStatus(TypedDict):
    """A component's data capture (the console's `capture`; null: off)."""

    destination: str  # the folder or s3:// prefix given (S3's credentials come from the environment)
    location: str  # where its files go: DESTINATION/ENDPOINT/VARIANT/
    percent: int
    modes: list[str]  # input, output
    lines_written: int
    lines_dropped: int
    dropped_by_reason: dict[str, int]  # queue_full, write_failed


class CaptureTally:
    """Each component's lines since the console began, over every copy it had."""

    def __init__(self) -> None:
        self._last: dict[str, CaptureCounts] = {}  # by copy key: its counters when last read
        self._totals: dict[str, CaptureCounts] = {}  # by component

    def add(self, readings: Mapping[str, ComponentReading]) -> None:
        """What each copy wrote since its last reading (a copy not read this time keeps its last)."""
        seen = {c.key for r in readings.values() for c in r.copies}
        self._last = {k: v for k, v in self._last.items() if k in seen}
        self._totals = {name: self._totals.get(name, CaptureCounts()) for name in readings}
        for name, reading in readings.items():
            for c in reading.copies:
                if c.capture is None:
                    continue
                delta = c.capture.minus(self._last.get(c.key))
                self._totals[name] = self._totals[name].plus(delta)
                self._last[c.key] = c.capture

    def totals(self, component: str) -> CaptureCounts:
        return self._totals.get(component, CaptureCounts())


def capture_status(config: CaptureConfig | None, counts: CaptureCounts) -> CaptureStatus | None:
    """What the console shows of a component's capture; None: it captures nothing."""
    if config is None:
        return None
    return {
        "destination": config.destination,
        "location": config.location,
        "percent": config.percent,
        "modes": sorted(m.value for m in config.modes),
        "lines_written": int(counts.written),
        "lines_dropped": int(sum(counts.dropped.values())),
        "dropped_by_reason": {reason: int(n) for reason, n in sorted(counts.dropped.items())},
    }
