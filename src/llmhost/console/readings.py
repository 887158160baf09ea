"""What the sampler reads each period, and how two readings become a point.

A reading is cumulative (counters as a copy's /metrics or the router's counters hold them); a point is
the difference between two readings. Copies are keyed by their process (a restart is a new key), so a
restarted copy's counters, back at zero, count from zero rather than going negative.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.core import Metric

from llmhost.console.timeseries import Histo, Point

# the copies' metric families (llmhost.server.metrics's names, as the exposition format carries them)
GENERATION_TOKENS = "llmhost_generation_tokens"
RUNNING = "llmhost_num_requests_running"
WAITING = "llmhost_num_requests_waiting"
REJECTED = "llmhost_rejected_requests"
TTFT = "llmhost_time_to_first_token_seconds"
ITL = "llmhost_time_per_output_token_seconds"
# a copy's refusal reasons (HTTP statuses) that mean it had no room: its queue was full
NO_ROOM = frozenset({"429"})
# data capture's counters (llmhost.web.capture.metrics's), in a copy that captures
CAPTURE_WRITTEN = "llmhost_capture_lines_written"
CAPTURE_DROPPED = "llmhost_capture_lines_dropped"


@dataclass(frozen=True)
class EngineReading:
    """One copy's engine counters at one instant."""

    output_tokens: float = 0.0
    running: float = 0.0
    waiting: float = 0.0
    rejected: dict[str, float] = field(default_factory=dict)
    ttft: Histo = field(default_factory=Histo)
    itl: Histo = field(default_factory=Histo)

    def minus(self, earlier: EngineReading | None) -> EngineReading:
        """Counters since `earlier` (gauges as they are now); a reset counts from zero."""
        if earlier is None or self.output_tokens < earlier.output_tokens:
            return self
        rejected = {k: v - earlier.rejected.get(k, 0.0) for k, v in self.rejected.items()}
        return replace(
            self,
            output_tokens=self.output_tokens - earlier.output_tokens,
            rejected={k: v for k, v in rejected.items() if v > 0},
            ttft=self.ttft.minus(earlier.ttft),
            itl=self.itl.minus(earlier.itl),
        )


def _histo(family: Metric) -> Histo:
    buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket"))
    total = sum(s.value for s in family.samples if s.name.endswith("_sum"))
    return Histo(tuple(b for b, _ in buckets), tuple(c for _, c in buckets), total)


def engine_reading(families: Iterable[Metric]) -> EngineReading:
    """A copy's reading from its metric families (parsed /metrics text, or its registry's collect())."""
    by_name = {f.name: f for f in families}

    def total(name: str, suffix: str = "") -> float:
        f = by_name.get(name)
        return sum(s.value for s in f.samples if s.name == name + suffix) if f else 0.0

    rejected: dict[str, float] = {}
    if (f := by_name.get(REJECTED)) is not None:
        for s in f.samples:
            if s.name.endswith("_total"):
                reason = s.labels.get("reason", "")
                rejected[reason] = rejected.get(reason, 0.0) + s.value
    return EngineReading(
        output_tokens=total(GENERATION_TOKENS, "_total"),
        running=total(RUNNING),
        waiting=total(WAITING),
        rejected=rejected,
        ttft=_histo(by_name[TTFT]) if TTFT in by_name else Histo(),
        itl=_histo(by_name[ITL]) if ITL in by_name else Histo(),
    )


@dataclass(frozen=True)
class CaptureCounts:
    """A copy's data capture counters at one instant: lines written, lines dropped by reason."""

    written: float = 0.0
    dropped: Mapping[str, float] = field(default_factory=dict)

    def minus(self, earlier: CaptureCounts | None) -> CaptureCounts:
        """Lines since `earlier`; a reset (a fresh process under the same key) counts from zero."""
        if earlier is None or self.written < earlier.written:
            return self
        if any(n < earlier.dropped.get(k, 0.0) for k, n in self.dropped.items()):
            return self
        dropped = {k: n - earlier.dropped.get(k, 0.0) for k, n in self.dropped.items()}
        return CaptureCounts(self.written - earlier.written, dropped)

    def plus(self, other: CaptureCounts) -> CaptureCounts:
        dropped = dict(self.dropped)
        for reason, n in other.dropped.items():
            dropped[reason] = dropped.get(reason, 0.0) + n
        return CaptureCounts(self.written + other.written, dropped)


def capture_counts(families: Iterable[Metric]) -> CaptureCounts | None:
    """A copy's capture counters from its metric families; None: it has none (it captures nothing)."""
    by_name = {f.name: f for f in families}
    written = by_name.get(CAPTURE_WRITTEN)
    if written is None:
        return None
    dropped: dict[str, float] = {}
    if (f := by_name.get(CAPTURE_DROPPED)) is not None:
        for s in f.samples:
            if s.name.endswith("_total"):
                dropped[s.labels.get("reason", "")] = s.value
    return CaptureCounts(sum(s.value for s in written.samples if s.name.endswith("_total")), dropped)


@dataclass(frozen=True)
class CopyReading:
    key: str  # this copy's process: a restart is a new key
    engine: EngineReading | None  # None: its metrics could not be read this time
    cpu_s: float | None  # CPU seconds its process used so far (None: not running)
    rss_mb: float | None
    cpus_reserved: float
    memory_reserved_mb: float
    capture: CaptureCounts | None = None  # None: it captures nothing, or its metrics were not read


@dataclass(frozen=True)
class FrontReading:
    """What the front door (the endpoint's router, or a lone server) counted for one component."""

    responses: Mapping[int, int] = field(default_factory=dict)  # by HTTP status
    no_capacity: int = 0  # refused by the front door itself: no ready copy in time
    timed: int = 0
    latency_s: float = 0.0
    model_latency_s: float = 0.0
    in_flight: int = 0
    waiting: int = 0  # waiting at the front door for a ready copy


@dataclass(frozen=True)
class ComponentReading:
    front: FrontReading
    copies: tuple[CopyReading, ...]
    ready: int


def _class_count(responses: Mapping[int, int], earlier: Mapping[int, int], lo: int) -> int:
    return sum(n - earlier.get(code, 0) for code, n in responses.items() if lo <= code < lo + 100)


class Differ:
    """Turns each component's successive readings into points; the first reading is only a baseline."""

    def __init__(self) -> None:
        self._front: dict[str, FrontReading] = {}
        self._copies: dict[str, CopyReading] = {}  # by copy key: the last reading that had each figure
        self._t: float | None = None

    def points(self, t: float, readings: Mapping[str, ComponentReading]) -> dict[str, Point]:
        """Points for the period ending at `t` (none for the very first reading)."""
        period = t - self._t if self._t is not None else None
        self._t = t
        out: dict[str, Point] = {}
        seen = {c.key for r in readings.values() for c in r.copies}
        for key in [k for k in self._copies if k not in seen]:  # copies gone: their counters with them
            del self._copies[key]
        for name, reading in readings.items():
            earlier = self._front.get(name)
            self._front[name] = reading.front
            point = self._point(t, period, reading, earlier)
            if point is not None:
                out[name] = point
        return out

    def _point(
        self, t: float, period: float | None, r: ComponentReading, earlier: FrontReading | None
    ) -> Point | None:
        copies = self._copy_figures(r.copies)
        if period is None or period <= 0:
            return None
        before = earlier or FrontReading()
        f = r.front
        invocations = sum(f.responses.values()) - sum(before.responses.values())
        return Point(
            t=t,
            period_s=period,
            copies=r.ready,
            invocations=invocations,
            errors_4xx=_class_count(f.responses, before.responses, 400),
            errors_5xx=_class_count(f.responses, before.responses, 500),
            no_capacity=f.no_capacity - before.no_capacity + int(sum(copies.no_room)),
            timed=f.timed - before.timed,
            latency_ms=(f.latency_s - before.latency_s) * 1000,
            model_latency_ms=(f.model_latency_s - before.model_latency_s) * 1000,
            in_flight=f.in_flight,
            cpu_s=copies.cpu_s,
            cpu_reserved=copies.cpu_reserved,
            rss_mb=copies.rss_mb,
            memory_reserved_mb=copies.memory_reserved_mb,
            output_tokens=copies.engine.output_tokens,
            running=copies.engine.running,
            waiting=copies.engine.waiting + f.waiting,
            refusals=self._refusals(copies.engine, f, before),
            ttft=copies.engine.ttft,
            itl=copies.engine.itl,
        )

    @staticmethod
    def _refusals(engine: EngineReading, f: FrontReading, before: FrontReading) -> dict[str, float]:
        out = {f"copy {reason}": n for reason, n in engine.rejected.items()}
        if f.no_capacity > before.no_capacity:
            out["no ready copy"] = float(f.no_capacity - before.no_capacity)
        return out

    def _copy_figures(self, copies: Iterable[CopyReading]) -> _CopyFigures:
        figures = _CopyFigures()
        for c in copies:
            earlier = self._copies.get(c.key)
            if c.engine is not None:
                figures.add_engine(c.engine.minus(earlier.engine if earlier else None))
            if c.cpu_s is not None and earlier is not None and earlier.cpu_s is not None:
                figures.cpu_s += max(0.0, c.cpu_s - earlier.cpu_s)
                figures.cpu_reserved += c.cpus_reserved
            if c.rss_mb is not None:
                figures.rss_mb += c.rss_mb
                figures.memory_reserved_mb += c.memory_reserved_mb
            # a figure not read this time keeps its last reading: the next delta spans both periods
            self._copies[c.key] = CopyReading(
                c.key,
                c.engine or (earlier.engine if earlier else None),
                c.cpu_s if c.cpu_s is not None else (earlier.cpu_s if earlier else None),
                c.rss_mb,
                c.cpus_reserved,
                c.memory_reserved_mb,
            )
        return figures


@dataclass
class _CopyFigures:
    cpu_s: float = 0.0
    cpu_reserved: float = 0.0
    rss_mb: float = 0.0
    memory_reserved_mb: float = 0.0
    engine: EngineReading = field(default_factory=EngineReading)
    no_room: list[float] = field(default_factory=list)

    def add_engine(self, delta: EngineReading) -> None:
        e = self.engine
        rejected = dict(e.rejected)
        for reason, n in delta.rejected.items():
            rejected[reason] = rejected.get(reason, 0.0) + n
            if reason in NO_ROOM:
                self.no_room.append(n)
        self.engine = EngineReading(
            output_tokens=e.output_tokens + delta.output_tokens,
            running=e.running + delta.running,
            waiting=e.waiting + delta.waiting,
            rejected=rejected,
            ttft=e.ttft.plus(delta.ttft),
            itl=e.itl.plus(delta.itl),
        )
