"""Stopping a level once it can no longer meet its SLO: the counting rule, and a real level against a
fake server whose requests queue (one stream at a time)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmhost.bench import BenchConfig, run_benchmark
from llmhost.bench.figures.metrics import RequestRecord
from llmhost.bench.load.slostop import STOPPED, SloStop, SloWatch


def _ok(ttft: float, tpot: float) -> RequestRecord:
    r = RequestRecord("c", "c=1", 0, 0.0, False)
    r.finish_ok([ttft, ttft + tpot], ttft + tpot, 2)
    return r


@pytest.mark.parametrize("n", [1, 2, 5, 10, 16, 20, 37, 100])
@pytest.mark.parametrize("p", [50.0, 90.0, 99.0])
def test_stopping_count_is_exactly_where_the_percentile_must_exceed_the_bound(n: int, p: float) -> None:
    k = SloStop(p, n, ttft_s=1.0).misses_to_stop()
    # k values over the bound (2.0) and the rest as low as can be: numpy's percentile is over it ...
    assert np.percentile([0.0] * (n - k) + [2.0] * k, p) > 1.0
    # ... while with one fewer it can still be within (the others low, those over it barely)
    if k > 1:
        assert np.percentile([0.0] * (n - k + 1) + [1.0 + 1e-9] * (k - 1), p) <= 1.0


def test_watch_counts_waiting_finished_and_failed_requests() -> None:
    stop = SloStop(90.0, 16, ttft_s=0.5, tpot_s=0.05)
    assert stop.misses_to_stop() == 3 and stop.failures_allowed == 1
    w = SloWatch(stop)
    waiting = RequestRecord("c", "c=4", 1, 0.0, False)
    assert w.waiting(waiting, 0.4) is None and w.ttft_misses == 0  # not past the bound yet
    assert w.waiting(waiting, 0.6) is None and w.waiting(waiting, 0.9) is None  # counted once
    assert w.finished(_ok(0.1, 0.01)) is None
    assert w.finished(_ok(0.7, 0.01)) is None  # second over the TTFT bound
    why = w.finished(_ok(0.8, 0.01))
    assert why is not None and "3 of 16 requests over the TTFT bound" in why
    w = SloWatch(stop)
    for _ in range(2):
        assert w.finished(_ok(0.1, 0.2)) is None
    assert "TPOT" in (w.finished(_ok(0.1, 0.2)) or "")
    w = SloWatch(stop)
    assert w.finished(RequestRecord("c", "c=4", 1, 0.0, False)) is None  # one failure allowed
    assert "failed" in (w.finished(RequestRecord("c", "c=4", 2, 0.0, False)) or "")


def test_a_waiting_request_that_fails_counts_as_a_failure_not_a_miss() -> None:
    w = SloWatch(SloStop(90.0, 16, ttft_s=0.5))
    rec = RequestRecord("c", "c=4", 1, 0.0, False)
    w.waiting(rec, 1.0)
    w.finished(rec)
    assert w.ttft_misses == 0 and w.failed == 1


def test_rule_needs_bounds_and_a_request_count(fake_url: str) -> None:
    with pytest.raises(ValueError):
        SloStop(90.0, 16)
    with pytest.raises(ValueError):
        SloStop(100.0, 16, ttft_s=1.0)
    with pytest.raises(ValueError, match="goodput"):
        BenchConfig(url=fake_url, requests=8, slo_stop=90.0).validate()
    with pytest.raises(ValueError, match="request count"):
        BenchConfig(url=fake_url, duration_s=5, goodput={"ttft": 100}, slo_stop=90.0).validate()


def test_a_queueing_level_stops_early_and_the_load_rises_no_further(
    fake_url_serial: str, tmp_path: Path
) -> None:
    # one stream at a time, each ~0.23 s: at c=4 the others wait past the 400 ms TTFT bound
    cfg = BenchConfig(
        url=fake_url_serial,
        concurrency=[1, 4, 8],
        requests=20,
        prompt_tokens=4,
        max_new_tokens=10,
        goodput={"ttft": 400.0},
        slo_stop=90.0,
        saturation_gain=None,
        server_metrics=False,
    )
    [config] = run_benchmark(cfg, tmp_path).configs
    assert [lv.level for lv in config.levels] == ["c=1", "c=4"]
    c1, c4 = config.levels
    assert c1.stopped is None and c1.requests == 20
    assert c4.stopped == STOPPED and c4.requests < 20  # in-flight requests complete; no new ones
    assert c4.stop_detail is not None and "over the TTFT bound" in c4.stop_detail
    assert config.stopped == STOPPED and config.skipped_levels == ["c=8"]
    assert "cannot meet the SLO" in config.stop_detail
