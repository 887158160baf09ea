"""Stopping a load level as soon as it can no longer meet an SLO at a percentile.

A level of N requests meets "the P-th percentile of X ≤ bound" only while few enough requests exceed
the bound. Percentiles interpolate linearly between the two sorted values around rank
P/100 · (N − 1) (numpy's default), so once k requests are known to exceed it with
k ≥ N − ⌊P/100 · (N − 1)⌋, both of those values lie above the bound and so does the percentile,
whatever the other requests do. Likewise a level needs at least P% of its requests to succeed: more
than N · (1 − P/100) failures and it cannot. From then on the level sends nothing more (requests in
flight complete) and no higher load is tried: more load only adds latency.

A request is known to miss the TTFT bound as soon as it has waited that long without a first token,
before it ends: a configuration whose requests queue is stopped within seconds instead of after
every queued request has been served. The TPOT of a request is known when it ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmhost.bench.figures.metrics import RequestRecord
from llmhost.bench.figures.slo import GoodputSLO

STOPPED = "slo_missed"  # LevelSummary.stopped of a level stopped this way


@dataclass(frozen=True)
class SloStop:
    """The bounds a level is held to, at ``percentile``, over ``requests`` measured requests."""

    percentile: float
    requests: int
    ttft_s: float | None = None
    tpot_s: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.percentile < 100.0:
            raise ValueError("the SLO percentile is in (0, 100)")
        if self.requests < 1:
            raise ValueError("an SLO stop needs a request count per level")
        if self.ttft_s is None and self.tpot_s is None:
            raise ValueError("an SLO stop needs a TTFT or a TPOT bound")

    def misses_to_stop(self, failed: int = 0) -> int:
        """Successful requests over one bound that make the percentile exceed it for certain (the
        percentiles are over the successful requests: ``failed`` are not among them)."""
        n = self.requests - failed
        return n - math.floor(self.percentile / 100.0 * (n - 1))

    @property
    def failures_allowed(self) -> int:
        return math.floor(self.requests * (1.0 - self.percentile / 100.0) + 1e-9)


def stop_rule(slo: GoodputSLO | None, percentile: float, requests: int | None) -> SloStop:
    """The stop of ``llmhost bench --slo-stop P``: goodput's TTFT and TPOT bounds at P over a level's
    request count."""
    if slo is None or (slo.ttft_ms is None and slo.tpot_ms is None):
        raise ValueError("stopping on an SLO needs goodput ttft and/or tpot bounds")
    if requests is None:
        raise ValueError("stopping on an SLO needs a request count per level (--requests)")
    ttft = slo.ttft_ms / 1000.0 if slo.ttft_ms is not None else None
    tpot = slo.tpot_ms / 1000.0 if slo.tpot_ms is not None else None
    return SloStop(percentile, requests, ttft, tpot)


@dataclass
class SloWatch:
    """What one level has shown so far against its :class:`SloStop`."""

    stop: SloStop
    waiting_late: set[int] = field(default_factory=set)  # id() of requests in flight past the TTFT bound
    ttft_missed: int = 0  # finished successful requests over the TTFT bound
    tpot_missed: int = 0
    failed: int = 0

    @property
    def ttft_misses(self) -> int:
        return self.ttft_missed + len(self.waiting_late)

    def finished(self, rec: RequestRecord) -> str | None:
        """Count a finished request; why the level can no longer meet the SLO, or ``None``."""
        self.waiting_late.discard(id(rec))  # counted below by how it ended
        if not rec.ok:
            self.failed += 1
        else:
            if self.stop.ttft_s is not None and (rec.ttft_s or 0.0) > self.stop.ttft_s:
                self.ttft_missed += 1
            if self.stop.tpot_s is not None and (rec.tpot_s or 0.0) > self.stop.tpot_s:
                self.tpot_missed += 1
        return self.verdict()

    def waiting(self, rec: RequestRecord, waited_s: float) -> str | None:
        """Count a request in flight (``rec`` stays alive until it finishes) that has had no first token
        for ``waited_s``."""
        bound = self.stop.ttft_s
        if bound is not None and rec.ttft_s is None and waited_s > bound:
            self.waiting_late.add(id(rec))
        return self.verdict()

    def verdict(self) -> str | None:
        s, p = self.stop, f"p{self.stop.percentile:g}"
        if self.failed > s.failures_allowed:
            return f"{self.failed} of {s.requests} requests failed: fewer than {s.percentile:g}% can succeed"
        need = s.misses_to_stop(self.failed)
        for what, missed in (("TTFT", self.ttft_misses), ("TPOT", self.tpot_missed)):
            if missed >= need:
                return f"{missed} of {s.requests} requests over the {what} bound: {p} {what} cannot meet it"
        return None
