"""Readings to points: what a copy's /metrics says (parsed text or its registry, alike), counters made
into per-period differences, restarts and missed scrapes, and the front door's counts by status class."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmhost.console.readings import (
    ComponentReading,
    CopyReading,
    Differ,
    EngineReading,
    FrontReading,
    engine_reading,
)
from llmhost.console.timeseries import Histo
from llmhost.server.metrics import ServerMetrics


def served_metrics() -> ServerMetrics:
    m = ServerMetrics()
    m.generation_tokens.inc(40)
    m.ttft.observe(0.03)
    m.ttft.observe(0.3)
    m.tpot.observe(0.012)
    m.rejected.labels(reason="429").inc(2)
    m.rejected.labels(reason="400").inc()
    return m


def test_a_copy_reads_the_same_from_its_registry_and_from_its_metrics_text() -> None:
    m = served_metrics()
    direct = engine_reading(m.registry.collect())
    parsed = engine_reading(text_string_to_metric_families(generate_latest(m.registry).decode()))
    assert direct == parsed
    assert direct.output_tokens == 40 and direct.rejected == {"429": 2, "400": 1}
    assert direct.ttft.count == 2 and direct.ttft.sum == pytest.approx(0.33)
    assert direct.itl.count == 1
    assert engine_reading([]) == EngineReading()


def engine(tokens: float, ttft_n: float = 0, rejected: dict[str, float] | None = None) -> EngineReading:
    bounds = (0.1, float("inf"))
    return EngineReading(
        output_tokens=tokens,
        running=1,
        waiting=2,
        rejected=rejected or {},
        ttft=Histo(bounds, (ttft_n, ttft_n), 0.05 * ttft_n),
    )


def reading(
    responses: dict[int, int],
    copies: list[CopyReading],
    no_capacity: int = 0,
    timed: int = 0,
    latency_s: float = 0.0,
    model_s: float = 0.0,
) -> ComponentReading:
    front = FrontReading(
        responses=responses,
        no_capacity=no_capacity,
        timed=timed,
        latency_s=latency_s,
        model_latency_s=model_s,
        in_flight=3,
        waiting=1,
    )
    return ComponentReading(front, tuple(copies), ready=len(copies))


def copy(key: str, e: EngineReading | None, cpu: float | None = 1.0) -> CopyReading:
    return CopyReading(key, e, cpu, 300.0, 0.5, 600.0)


def test_the_first_reading_is_a_baseline_then_periods_are_differences() -> None:
    d = Differ()
    assert d.points(100.0, {"a": reading({200: 5}, [copy("a-0#0", engine(10, 1))])}) == {}
    r = reading(
        {200: 9, 404: 1, 429: 2, 503: 1},
        [copy("a-0#0", engine(30, 4, {"429": 2}), cpu=2.5)],
        no_capacity=1,
        timed=6,
        latency_s=1.2,
        model_s=1.0,
    )
    p = d.points(105.0, {"a": r})["a"]
    assert (p.t, p.period_s, p.copies) == (105.0, 5.0, 1)
    assert p.invocations == 4 + 1 + 2 + 1
    assert (p.errors_4xx, p.errors_5xx) == (3, 1)
    assert p.no_capacity == 1 + 2  # the router's own, and the copy's full queue (429)
    assert p.refusals == {"copy 429": 2, "no ready copy": 1}
    assert (p.timed, p.latency_ms, p.model_latency_ms) == (6, pytest.approx(1200), pytest.approx(1000))
    assert p.output_tokens == 20 and p.ttft.count == 3
    assert (p.cpu_s, p.cpu_reserved) == (pytest.approx(1.5), 0.5)
    assert (p.rss_mb, p.memory_reserved_mb) == (300.0, 600.0)
    assert (p.running, p.waiting, p.in_flight) == (1, 2 + 1, 3)


def test_a_restarted_copy_counts_from_zero_and_a_missed_scrape_is_caught_up() -> None:
    d = Differ()
    d.points(0.0, {"a": reading({}, [copy("a-0#0", engine(50))])})
    # the copy died and restarted (a new key): its 7 tokens are all new; no CPU delta without a baseline
    p = d.points(5.0, {"a": reading({}, [copy("a-0#1", engine(7))])})["a"]
    assert p.output_tokens == 7 and p.cpu_reserved == 0
    # its metrics could not be read this time: nothing counted, nothing lost
    p = d.points(10.0, {"a": reading({}, [copy("a-0#1", None)])})["a"]
    assert p.output_tokens == 0
    p = d.points(15.0, {"a": reading({}, [copy("a-0#1", engine(20))])})["a"]
    assert p.output_tokens == 13
    # a counter that went backwards under the same key (a reset): counted from zero
    p = d.points(20.0, {"a": reading({}, [copy("a-0#1", engine(5))])})["a"]
    assert p.output_tokens == 5


def test_a_component_added_later_starts_from_zero() -> None:
    d = Differ()
    d.points(0.0, {"a": reading({}, [])})
    points = d.points(5.0, {"a": reading({}, []), "b": reading({200: 2}, [copy("b-0#0", engine(4))])})
    assert points["b"].invocations == 2 and points["b"].output_tokens == 4
    assert points["a"].copies == 0 and points["a"].memory_reserved_mb == 0
