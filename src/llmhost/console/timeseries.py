"""The console's time series: a ring buffer of points per component, each point what happened during one
sampling period, and one aggregation that turns any run of points (one point, or a window of them) into
figures named as CloudWatch names them for a SageMaker endpoint's inference components.

A point keeps sums and counts, never averages or percentiles: a window's figures are computed from the
merged sums and the merged latency histograms (the copies' Prometheus buckets), so the p99 of five
minutes is the p99 of those five minutes' requests, not an average of per-period p99s.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


class Ring(Generic[T]):
    """The last `capacity` items, oldest first; appending to a full ring drops the oldest."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[T] = deque(maxlen=capacity)

    def append(self, item: T) -> None:
        self._items.append(item)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def last(self) -> T | None:
        return self._items[-1] if self._items else None


@dataclass(frozen=True)
class Histo:
    """A Prometheus histogram's cumulative buckets (upper bounds ascending, the last +Inf) and sum."""

    bounds: tuple[float, ...] = ()
    counts: tuple[float, ...] = ()  # cumulative: counts[i] observations <= bounds[i]
    sum: float = 0.0

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.counts):
            raise ValueError(f"{len(self.bounds)} bounds for {len(self.counts)} counts")

    @property
    def count(self) -> float:
        return self.counts[-1] if self.counts else 0.0

    def minus(self, earlier: Histo) -> Histo:
        """What was observed since `earlier`; a reset (the copy restarted) or other buckets: all of self."""
        went_down = any(a < b for a, b in zip(self.counts, earlier.counts, strict=True))
        if earlier.bounds != self.bounds or went_down:
            return self
        counts = tuple(a - b for a, b in zip(self.counts, earlier.counts, strict=True))
        return Histo(self.bounds, counts, max(0.0, self.sum - earlier.sum))

    def plus(self, other: Histo) -> Histo:
        if not other.bounds:
            return self
        if not self.bounds:
            return other
        if other.bounds != self.bounds:
            raise ValueError("histograms with different buckets cannot be merged")
        counts = tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        return Histo(self.bounds, counts, self.sum + other.sum)

    def quantile(self, q: float) -> float | None:
        """Prometheus's histogram_quantile: linear within the bucket holding rank q*count; None when empty.
        A rank in the +Inf bucket answers the largest finite bound (all one can say)."""
        if not 0 <= q <= 1:
            raise ValueError(f"q must be in [0, 1], got {q}")
        total = self.count
        if total <= 0:
            return None
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, cum in zip(self.bounds, self.counts, strict=True):
            if cum >= rank and cum > lower_count:
                if math.isinf(bound):
                    return lower_bound
                return lower_bound + (bound - lower_bound) * (rank - lower_count) / (cum - lower_count)
            lower_bound, lower_count = bound, cum
        return lower_bound


def merged(histos: Iterable[Histo]) -> Histo:
    out = Histo()
    for h in histos:
        out = out.plus(h)
    return out


@dataclass(frozen=True)
class Point:
    """One component during one sampling period ending at `t` (Unix seconds): sums and counts only."""

    t: float
    period_s: float
    copies: int  # ready copies at the end of the period
    invocations: int = 0  # requests answered (any status) by the front door
    errors_4xx: int = 0
    errors_5xx: int = 0
    no_capacity: int = 0  # refused for want of a copy: no ready copy in time, or its queue full
    timed: int = 0  # invocations whose latencies are in the two sums below
    latency_ms: float = 0.0  # front door: arrival to the last byte sent
    model_latency_ms: float = 0.0  # sent to the copy until its answer's last byte
    in_flight: int = 0  # at the front door, at the end of the period
    cpu_s: float = 0.0  # CPU seconds the copies used during the period
    cpu_reserved: float = 0.0  # CPUs reserved for the copies that cpu_s covers
    rss_mb: float = 0.0
    memory_reserved_mb: float = 0.0  # what rss_mb is normalized to
    output_tokens: float = 0.0
    running: float = 0.0  # sequences decoding in the copies, at the end of the period
    waiting: float = 0.0  # queued in the copies plus waiting at the front door for a copy
    refusals: dict[str, float] = field(default_factory=dict)  # by reason
    ttft: Histo = field(default_factory=Histo)  # seconds, observed during the period
    itl: Histo = field(default_factory=Histo)  # seconds per output token after the first


@dataclass(frozen=True)
class MetricDef:
    name: str  # CloudWatch's name where it has one
    unit: str
    stat: str  # the statistic a window of points gives (CloudWatch's word)
    help: str


# the one list of series: the JSON, /metrics and the page read names, units and meanings from here
METRICS: tuple[MetricDef, ...] = (
    MetricDef("Invocations", "Count", "Sum", "Requests answered, any status"),
    MetricDef("InvocationsPerCopy", "Count", "Sum", "Invocations divided by the ready copies"),
    MetricDef("ModelLatency", "Milliseconds", "Average", "Sent to a copy until its answer's last byte"),
    MetricDef(
        "OverheadLatency",
        "Milliseconds",
        "Average",
        "Time added in front of the copy (routing, waiting for a copy, relaying)",
    ),
    MetricDef("Invocation4XXErrors", "Count", "Sum", "Answers with a 4xx status"),
    MetricDef("Invocation5XXErrors", "Count", "Sum", "Answers with a 5xx status"),
    MetricDef(
        "NoCapacityInvocationFailures",
        "Count",
        "Sum",
        "Refused for want of capacity: no ready copy in time, or a copy's queue full",
    ),
    MetricDef("ConcurrentRequestsPerCopy", "Count", "Average", "Requests in flight per ready copy"),
    MetricDef("CPUUtilizationNormalized", "Percent", "Average", "Copies' CPU time over their reserved CPUs"),
    MetricDef("MemoryUtilizationNormalized", "Percent", "Average", "Copies' RSS over their reserved memory"),
    MetricDef("TimeToFirstTokenP50", "Milliseconds", "p50", "Arrival to first token, median"),
    MetricDef("TimeToFirstTokenP99", "Milliseconds", "p99", "Arrival to first token, 99th percentile"),
    MetricDef("InterTokenLatencyP50", "Milliseconds", "p50", "Time per output token after the first, median"),
    MetricDef("InterTokenLatencyP99", "Milliseconds", "p99", "Time per output token after the first, p99"),
    MetricDef("OutputTokensPerSecond", "Count/Second", "Rate", "Tokens generated per second"),
    MetricDef("RequestsRunning", "Count", "Average", "Sequences decoding in the copies"),
    MetricDef("RequestsWaiting", "Count", "Average", "Requests queued in the copies or waiting for a copy"),
    MetricDef("CopiesReady", "Count", "Average", "Ready copies"),
)
NAMES = tuple(m.name for m in METRICS)


def _ratio(num: float, den: float, scale: float = 1.0) -> float | None:
    return num / den * scale if den > 0 else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ms(seconds: float | None) -> float | None:
    return seconds * 1000 if seconds is not None else None


def summarize(points: Sequence[Point]) -> dict[str, float | None]:
    """The figures of a run of points, by name (None: nothing to say, e.g. no request was timed).
    Sums add up; averages weigh each request (latencies) or each period (gauges); percentiles come
    from the merged histograms; rates divide by the time covered."""
    if not points:
        return dict.fromkeys(NAMES)
    invocations = sum(p.invocations for p in points)
    timed = sum(p.timed for p in points)
    latency, model = sum(p.latency_ms for p in points), sum(p.model_latency_ms for p in points)
    ttft, itl = merged(p.ttft for p in points), merged(p.itl for p in points)
    with_copies = [p for p in points if p.copies > 0]
    return {
        "Invocations": float(invocations),
        "InvocationsPerCopy": sum(p.invocations / p.copies for p in with_copies),
        "ModelLatency": _ratio(model, timed),
        "OverheadLatency": _ratio(max(0.0, latency - model), timed),
        "Invocation4XXErrors": float(sum(p.errors_4xx for p in points)),
        "Invocation5XXErrors": float(sum(p.errors_5xx for p in points)),
        "NoCapacityInvocationFailures": float(sum(p.no_capacity for p in points)),
        "ConcurrentRequestsPerCopy": _mean([p.in_flight / p.copies for p in with_copies]),
        "CPUUtilizationNormalized": _ratio(
            sum(p.cpu_s for p in points), sum(p.cpu_reserved * p.period_s for p in points), 100
        ),
        "MemoryUtilizationNormalized": _mean(
            [p.rss_mb / p.memory_reserved_mb * 100 for p in points if p.memory_reserved_mb > 0]
        ),
        "TimeToFirstTokenP50": _ms(ttft.quantile(0.5)),
        "TimeToFirstTokenP99": _ms(ttft.quantile(0.99)),
        "InterTokenLatencyP50": _ms(itl.quantile(0.5)),
        "InterTokenLatencyP99": _ms(itl.quantile(0.99)),
        "OutputTokensPerSecond": _ratio(
            sum(p.output_tokens for p in points), sum(p.period_s for p in points)
        ),
        "RequestsRunning": _mean([p.running for p in points]),
        "RequestsWaiting": _mean([p.waiting for p in points]),
        "CopiesReady": _mean([float(p.copies) for p in points]),
    }


def refusals(points: Iterable[Point]) -> dict[str, float]:
    """Refusals by reason over a run of points."""
    out: dict[str, float] = {}
    for p in points:
        for reason, n in p.refusals.items():
            out[reason] = out.get(reason, 0.0) + n
    return out


class SeriesStore:
    """Each component's points for the last `retention_s`, one every `period_s`, kept in the server."""

    def __init__(self, period_s: float = 5.0, retention_s: float = 900.0) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        if retention_s < period_s:
            raise ValueError(f"retention_s must be >= period_s ({period_s}), got {retention_s}")
        self.period_s = period_s
        self.retention_s = retention_s
        self.capacity = math.ceil(retention_s / period_s)
        self._rings: dict[str, Ring[Point]] = {}

    def record(self, component: str, point: Point) -> None:
        ring = self._rings.get(component)
        if ring is None:
            ring = self._rings[component] = Ring(self.capacity)
        ring.append(point)

    def forget_older(self, now: float) -> None:
        """Drop the rings whose last point is older than the retention (a component removed long ago)."""
        for name in [
            n for n, r in self._rings.items() if (last := r.last()) is None or last.t < now - self.retention_s
        ]:
            del self._rings[name]

    def components(self) -> list[str]:
        return list(self._rings)

    def points(self, component: str, since: float = -math.inf) -> list[Point]:
        """The component's points after `since` (Unix seconds), oldest first."""
        return [p for p in self._rings.get(component, ()) if p.t > since]

    def window(self, component: str, seconds: float, now: float) -> dict[str, float | None]:
        return summarize(self.points(component, now - seconds))

    def latest(self) -> dict[str, dict[str, float | None]]:
        """Each component's last point's figures (what /metrics shows)."""
        return {n: summarize([p]) for n, r in self._rings.items() if (p := r.last()) is not None}
