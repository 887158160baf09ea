"""The capture writer: a queue bounded in bytes, filled by requests without waiting (what does not fit
is dropped and counted), drained by a thread that turns events into lines and hands them to the sink.
A sink that is slow or down only fills the queue; it never reaches a request."""

from __future__ import annotations

import logging
import threading
from collections import deque

from llmhost.web.capture.record import Event, line
from llmhost.web.capture.sinks import Line, Sink, SinkError

log = logging.getLogger("llmhost.capture")

# the most seconds between two looks at the sink (an S3 upload falls due without new events)
TICK_S = 1.0
# the least bytes an event counts for in the queue's bound (an input-only event of an empty body)
EVENT_OVERHEAD = 256


class CaptureWriter:
    """`offer` from any thread (the event loop's), `start` once, `close` once: the queue's events are
    written and the sink's lines stored before it returns. Counters: lines `written`, events `dropped`
    because the queue was full, lines `failed` because the sink refused them."""

    def __init__(self, sink: Sink, max_bytes: int, tick_s: float = TICK_S) -> None:
        self.sink = sink
        self.max_bytes = max_bytes
        self.tick_s = tick_s
        self._queue: deque[Event] = deque()
        self._queued_bytes = 0
        self._ready = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failing = False  # the sink's last write failed: said once until it recovers
        self.written = 0
        self.dropped = 0
        self.failed = 0

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def offer(self, event: Event) -> bool:
        """Queue `event` if it fits; never waits."""
        size = event.size + EVENT_OVERHEAD
        with self._ready:
            if self._stopping or self._queued_bytes + size > self.max_bytes:
                self.dropped += 1
                return False
            self._queue.append(event)
            self._queued_bytes += size
            self._ready.notify()
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="llmhost capture", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop taking events, write those queued and store what the sink holds (an upload at most
        `timeout_s`: a sink that is down then loses them, counted)."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("capture: %s did not take the last lines within %g s", self.sink.where, timeout_s)
                return
        else:
            self._drain(force=True)
        self.sink.close()

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self._queue and not self._stopping:
                    self._ready.wait(self.tick_s)
                stopping = self._stopping
            self._drain(force=stopping)
            if stopping:
                return

    def _take(self) -> list[Event]:
        with self._ready:
            events = list(self._queue)
            self._queue.clear()
            self._queued_bytes = 0
        return events

    def _drain(self, force: bool) -> None:
        events = self._take()
        try:
            lines = [Line(e.time, line(e)) for e in events]
            self.written += self.sink.write(lines, force=force)
        except SinkError as exc:
            self.written += exc.stored
            self.failed += exc.lost
            if not self._failing:
                log.warning(
                    "capture: writing to %s failed, lines are dropped until it works: %s",
                    self.sink.where,
                    exc,
                )
            self._failing = True
            return
        except Exception:  # a bug here must not stop capture for the process's life
            self.failed += len(events)
            log.exception("capture: writing to %s failed", self.sink.where)
            return
        if self._failing and events:
            log.warning("capture: writing to %s works again", self.sink.where)
            self._failing = False
