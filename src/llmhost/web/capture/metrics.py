"""The capture writer's Prometheus families: lines written, lines dropped (by why) and bytes queued."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmhost.web.capture.writer import CaptureWriter

FAMILY = "llmhost_capture"


class CaptureCollector(Collector):
    def __init__(self, writer: CaptureWriter) -> None:
        self.writer = writer

    def collect(self) -> Iterable[Metric]:
        w = self.writer
        yield CounterMetricFamily(
            f"{FAMILY}_lines_written", "Captured lines stored in the destination", w.written
        )
        dropped = CounterMetricFamily(
            f"{FAMILY}_lines_dropped",
            "Captured lines lost: queue_full (the writer's queue had no room), write_failed (the "
            "destination refused them)",
            labels=["reason"],
        )
        dropped.add_metric(["queue_full"], w.dropped)
        dropped.add_metric(["write_failed"], w.failed)
        yield dropped
        yield GaugeMetricFamily(
            f"{FAMILY}_queue_bytes", "Captured bytes waiting for the writer", w.queued_bytes
        )
