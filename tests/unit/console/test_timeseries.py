"""The console's time series: the ring buffer, histogram percentiles over windows, and the figures named as
CloudWatch names them, computed from sums so that a window's figures are those of its requests."""

from __future__ import annotations

import math

import pytest

from llmhost.console.timeseries import METRICS, NAMES, Histo, Point, Ring, SeriesStore, refusals, summarize

BOUNDS = (0.1, 0.2, 0.5, 1.0, math.inf)


def histo(*per_bucket: float, total: float = 0.0) -> Histo:
    """From per-bucket counts (not cumulative) over BOUNDS."""
    cum, run = [], 0.0
    for n in per_bucket:
        run += n
        cum.append(run)
    return Histo(BOUNDS, tuple(cum), total)


def point(t: float, **kw: object) -> Point:
    base: dict[str, object] = {"t": t, "period_s": 5.0, "copies": 1}
    base.update(kw)
    return Point(**base)  # type: ignore[arg-type]


def test_ring_keeps_the_last_items_oldest_first() -> None:
    ring: Ring[int] = Ring(3)
    assert ring.last() is None and list(ring) == []
    for i in range(5):
        ring.append(i)
    assert list(ring) == [2, 3, 4] and len(ring) == 3 and ring.last() == 4
    with pytest.raises(ValueError, match="capacity"):
        Ring(0)


def test_quantile_interpolates_within_the_bucket() -> None:
    h = histo(10, 10, 0, 0, 0)  # 10 in (0, 0.1], 10 in (0.1, 0.2]
    assert h.count == 20
    assert h.quantile(0.5) == pytest.approx(0.1)  # rank 10: the top of the first bucket
    assert h.quantile(0.75) == pytest.approx(0.15)  # rank 15: half-way through the second
    assert h.quantile(0.25) == pytest.approx(0.05)
    assert h.quantile(1.0) == pytest.approx(0.2)


def test_quantile_of_nothing_and_of_the_inf_bucket() -> None:
    assert Histo().quantile(0.5) is None
    assert histo(0, 0, 0, 0, 0).quantile(0.99) is None
    assert histo(0, 0, 0, 1, 9).quantile(0.99) == 1.0  # beyond the last finite bound: that bound
    with pytest.raises(ValueError):
        histo(1, 0, 0, 0, 0).quantile(1.5)


def test_histogram_difference_and_reset() -> None:
    earlier, now = histo(1, 1, 0, 0, 0, total=0.3), histo(3, 1, 2, 0, 0, total=1.5)
    delta = now.minus(earlier)
    assert delta.counts == (2, 2, 4, 4, 4) and delta.sum == pytest.approx(1.2)
    # a restarted copy: its counters went back to zero; what it has now is all new
    assert histo(1, 0, 0, 0, 0).minus(now) == histo(1, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="different buckets"):
        now.plus(Histo((1.0, math.inf), (1, 1), 0.5))
    assert Histo().plus(now) == now and now.plus(Histo()) == now


def test_window_percentile_is_that_of_its_requests_not_an_average_of_percentiles() -> None:
    fast = point(1, ttft=histo(99, 0, 0, 0, 0))  # 99 requests under 100 ms
    slow = point(2, ttft=histo(0, 0, 0, 1, 0))  # one at 0.5-1 s
    p99s = [summarize([p])["TimeToFirstTokenP99"] for p in (fast, slow)]
    window = summarize([fast, slow])["TimeToFirstTokenP99"]
    assert window is not None and window == pytest.approx(100.0)  # rank 99 of 100: in the first bucket
    assert window < sum(p for p in p99s if p is not None) / 2  # an average of p99s would say ~547 ms
    assert summarize([slow])["TimeToFirstTokenP50"] == pytest.approx(750.0)


def test_cloudwatch_named_figures_of_a_window() -> None:
    a = point(
        5,
        copies=2,
        invocations=10,
        errors_4xx=1,
        errors_5xx=2,
        no_capacity=1,
        timed=8,
        latency_ms=800.0,
        model_latency_ms=720.0,
        in_flight=4,
        cpu_s=5.0,
        cpu_reserved=1.0,
        rss_mb=300.0,
        memory_reserved_mb=600.0,
        output_tokens=100.0,
        running=2,
        waiting=1,
        refusals={"copy 429": 1.0},
    )
    b = point(
        10,
        copies=1,
        invocations=4,
        timed=2,
        latency_ms=200.0,
        model_latency_ms=200.0,
        in_flight=1,
        cpu_s=1.0,
        cpu_reserved=1.0,
        rss_mb=450.0,
        memory_reserved_mb=600.0,
        output_tokens=50.0,
        running=0,
        waiting=0,
        refusals={"copy 429": 2.0, "no ready copy": 1.0},
    )
    f = summarize([a, b])
    assert set(f) == set(NAMES) == {m.name for m in METRICS}
    assert f["Invocations"] == 14
    assert f["InvocationsPerCopy"] == pytest.approx(10 / 2 + 4 / 1)
    assert f["ModelLatency"] == pytest.approx((720 + 200) / 10)  # per timed request, not per period
    assert f["OverheadLatency"] == pytest.approx((1000 - 920) / 10)
    errors = (f["Invocation4XXErrors"], f["Invocation5XXErrors"], f["NoCapacityInvocationFailures"])
    assert errors == (1, 2, 1)
    assert f["ConcurrentRequestsPerCopy"] == pytest.approx((4 / 2 + 1 / 1) / 2)
    assert f["CPUUtilizationNormalized"] == pytest.approx(6.0 / 10.0 * 100)  # 6 CPU-s of 1 CPU over 10 s
    assert f["MemoryUtilizationNormalized"] == pytest.approx((50 + 75) / 2)
    assert f["OutputTokensPerSecond"] == pytest.approx(150 / 10)
    assert (f["RequestsRunning"], f["RequestsWaiting"], f["CopiesReady"]) == (1.0, 0.5, 1.5)
    assert f["TimeToFirstTokenP50"] is None  # no request timed its first token
    assert refusals([a, b]) == {"copy 429": 3.0, "no ready copy": 1.0}


def test_nothing_to_say_is_none_not_zero() -> None:
    assert summarize([]) == dict.fromkeys(NAMES)
    idle = summarize([point(1, copies=0)])
    assert idle["Invocations"] == 0 and idle["ModelLatency"] is None
    assert idle["ConcurrentRequestsPerCopy"] is None
    assert idle["CPUUtilizationNormalized"] is None and idle["MemoryUtilizationNormalized"] is None


def test_store_keeps_the_retention_and_answers_windows() -> None:
    store = SeriesStore(period_s=5, retention_s=30)
    assert store.capacity == 6
    for i in range(10):
        store.record("a", point(100 + 5 * i, invocations=i))
    assert [p.invocations for p in store.points("a")] == [4, 5, 6, 7, 8, 9]
    assert [p.t for p in store.points("a", since=135)] == [140, 145]
    assert store.window("a", 10, now=145)["Invocations"] == 8 + 9
    assert store.latest() == {"a": summarize([point(145, invocations=9)])}
    store.record("gone", point(100))
    store.forget_older(now=131)
    assert store.components() == ["a"]
    with pytest.raises(ValueError):
        SeriesStore(period_s=0)
    with pytest.raises(ValueError):
        SeriesStore(period_s=10, retention_s=5)
