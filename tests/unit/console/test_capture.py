"""Data capture in the console: a copy's counters read alike from its registry and its /metrics text,
summed over a component's copies and kept across restarts and copies gone, and what the page is given."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmhost.console.capture import CaptureTally, capture_status
from llmhost.console.readings import (
    CaptureCounts,
    ComponentReading,
    CopyReading,
    FrontReading,
    capture_counts,
)
from llmhost.web.capture.config import CaptureConfig, parse_modes
from llmhost.web.capture.metrics import CaptureCollector
from llmhost.web.capture.sinks import FileSink
from llmhost.web.capture.writer import CaptureWriter


def test_a_copys_counters_read_alike_from_its_registry_and_its_metrics_text(tmp_path: Path) -> None:
    writer = CaptureWriter(FileSink(tmp_path, "chat", "AllTraffic"), 1024)
    writer.written, writer.dropped, writer.failed = 7, 2, 1
    registry = CollectorRegistry()
    registry.register(CaptureCollector(writer))
    direct = capture_counts(registry.collect())
    parsed = capture_counts(text_string_to_metric_families(generate_latest(registry).decode()))
    assert direct == parsed == CaptureCounts(7, {"queue_full": 2, "write_failed": 1})
    assert capture_counts(CollectorRegistry().collect()) is None  # a copy that captures nothing


def readings(*copies: tuple[str, CaptureCounts | None]) -> dict[str, ComponentReading]:
    read = tuple(CopyReading(key, None, None, None, 1.0, 600.0, counts) for key, counts in copies)
    return {"chat": ComponentReading(FrontReading(), read, len(read))}


def test_lines_are_summed_over_copies_and_kept_across_restarts_and_copies_gone() -> None:
    tally = CaptureTally()
    tally.add(readings(("chat-0#0", CaptureCounts(5)), ("chat-1#0", CaptureCounts(3, {"queue_full": 1}))))
    assert tally.totals("chat") == CaptureCounts(8, {"queue_full": 1})
    # chat-0 restarted (a new key, counting from zero), chat-1's metrics were not read this time
    tally.add(readings(("chat-0#1", CaptureCounts(2)), ("chat-1#0", None)))
    assert tally.totals("chat") == CaptureCounts(10, {"queue_full": 1})
    # chat-1 read again: only what it wrote since; then it is gone, its lines still counted
    tally.add(readings(("chat-0#1", CaptureCounts(2)), ("chat-1#0", CaptureCounts(4, {"queue_full": 1}))))
    tally.add(readings(("chat-0#1", CaptureCounts(6))))
    assert tally.totals("chat") == CaptureCounts(15, {"queue_full": 1})
    assert tally.totals("gone") == CaptureCounts()


def test_the_page_gets_where_how_much_and_the_lines_or_null_when_off() -> None:
    config = CaptureConfig("s3://bucket/cap", "chat", percent=20, modes=parse_modes("input"), variant="blue")
    shown = capture_status(config, CaptureCounts(9, {"queue_full": 2, "write_failed": 1}))
    assert shown == {
        "destination": "s3://bucket/cap",
        "location": "s3://bucket/cap/chat/blue/",
        "percent": 20,
        "modes": ["input"],
        "lines_written": 9,
        "lines_dropped": 3,
        "dropped_by_reason": {"queue_full": 2, "write_failed": 1},
    }
    assert CaptureConfig("out/", "chat").location == "out/chat/AllTraffic/"
    assert capture_status(None, CaptureCounts(1)) is None
