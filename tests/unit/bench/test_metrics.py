"""Per-request figures and per-level summaries: vLLM's definitions of TTFT, TPOT, ITL and goodput."""

from __future__ import annotations

import numpy as np
import pytest

from llmhost.bench.figures.metrics import RequestRecord, describe, summarize_level
from llmhost.bench.figures.slo import GoodputSLO


def _ok(times: list[float], e2e: float, tokens: int, prompt: int = 10, warmup: bool = False) -> RequestRecord:
    rec = RequestRecord("cfg", "c=2", 0, 0.0, warmup, prompt_tokens=prompt)
    rec.finish_ok(times, e2e, tokens)
    return rec


def _even(ttft: float, gap: float, events: int) -> list[float]:
    return [ttft + i * gap for i in range(events)]


def test_one_token_per_event() -> None:
    rec = _ok(_even(0.1, 0.1, 10), 1.0, 10)
    assert rec.ttft_s == pytest.approx(0.1) and rec.token_events == 10
    assert rec.itl_gaps_s == pytest.approx([0.1] * 9)
    assert rec.tpot_s == pytest.approx(0.9 / 9)  # (last − first) / (tokens − 1)
    assert rec.ms_per_token == pytest.approx(100.0)
    one = _ok([0.1], 0.1, 1)
    assert one.tpot_s is None and one.itl_gaps_s == [] and one.max_itl_s is None
    assert one.ms_per_token == pytest.approx(100.0)


def test_multi_token_events_give_one_gap_per_event_and_tpot_per_token() -> None:
    # 12 tokens in 4 events of 3 (a speculative server): 3 gaps of 60 ms, as vLLM records them
    rec = _ok([0.2, 0.26, 0.32, 0.38], 0.39, 12)
    assert rec.token_events == 4
    assert rec.itl_gaps_s == pytest.approx([0.06, 0.06, 0.06])
    assert rec.max_itl_s == pytest.approx(0.06)
    assert rec.tpot_s == pytest.approx(0.18 / 11)  # per token, not per event
    with pytest.raises(ValueError):
        RequestRecord("cfg", "c=1", 0, 0.0, False).finish_ok([], 1.0, 3)


def test_describe_is_numpy() -> None:
    values = [0.3, 0.1, 0.7, 0.2, 0.9, 0.5, 0.4]
    stats = describe(values)
    assert stats["mean"] == pytest.approx(float(np.mean(values)))
    for q in (50, 90, 99):
        assert stats[f"p{q}"] == pytest.approx(float(np.percentile(values, q)))
    assert describe([]) == {"mean": None, "p50": None, "p90": None, "p99": None}


def _summary(records: list[RequestRecord], slo: GoodputSLO | None = None, wall: float = 2.0):  # type: ignore[no-untyped-def]
    return summarize_level(
        records,
        config="cfg",
        level="c=2",
        mode="closed",
        concurrency=2,
        rate_rps=None,
        wall_s=wall,
        price_per_hour=1.52,
        discount=0.1,
        slo=slo,
    )


def test_summarize_level() -> None:
    records = [_ok(_even(0.1, 0.1, 10), 1.0, 10), _ok(_even(0.2, 0.2, 6), 1.2, 10)]
    records.append(_ok(_even(0.1, 0.1, 10), 1.0, 10, warmup=True))
    records.append(RequestRecord("cfg", "c=2", 1, 0.0, False, error="http_429", e2e_s=0.01))
    s = _summary(records)
    assert s.requests == 3 and s.successes == 2
    assert s.success_pct == pytest.approx(200 / 3)
    assert s.errors == {"http_429": 1}
    assert s.requests_per_s == pytest.approx(1.0)  # 2 successful requests / 2 s (the 429 excluded)
    assert s.output_tokens_per_s == pytest.approx(10.0)  # 20 tokens / 2 s, warm-up excluded
    assert s.input_tokens_per_s == pytest.approx(10.0)
    assert s.get("ttft_s_p50") == pytest.approx(0.15)
    tpots = [0.9 / 9, 1.0 / 9]  # the second: 6 events of 10 tokens, (1.2 − 0.2) / 9
    assert s.get("tpot_s_p50") == pytest.approx(float(np.median(tpots)))
    gaps = [0.1] * 9 + [0.2] * 5  # every gap of every request, not a mean per request
    assert s.get("itl_s_mean") == pytest.approx(float(np.mean(gaps)))
    assert s.get("itl_s_p50") == pytest.approx(float(np.percentile(gaps, 50)))
    assert s.get("itl_s_p99") == pytest.approx(float(np.percentile(gaps, 99)))
    assert s.minutes_per_1m_tokens == pytest.approx(1e6 / 10 / 60)
    assert s.cost_per_1m_tokens_usd == pytest.approx(1.52 * 1e6 / 10 / 3600)
    tpot_p50 = float(np.median(tpots))
    assert s.total_tokens_per_s_blended == pytest.approx(2 / tpot_p50)  # users / p50 TPOT
    assert s.blended_price_per_1m_tokens_usd == pytest.approx(0.9 * 1.52 / (2 / tpot_p50 * 3600 / 1e6) / 4)
    assert s.good_requests is None and s.goodput_rps is None  # no SLO given
    row = s.flat()
    assert row["errors_http_429"] == 1 and row["ttft_s_p50"] == pytest.approx(0.15)


def test_goodput_counts_successful_requests_meeting_every_bound() -> None:
    fast = _ok(_even(0.1, 0.02, 10), 0.3, 10)  # TTFT 100 ms, TPOT 20 ms, gaps 20 ms, E2E 300 ms
    slow_start = _ok(_even(0.5, 0.02, 10), 0.7, 10)  # TTFT 500 ms
    stall = _ok([0.1, 0.12, 0.4, 0.42], 0.43, 4)  # one gap of 280 ms, TPOT 107 ms
    single = _ok([0.1], 0.1, 1)  # no TPOT, no gap: meets those bounds, as in vLLM
    failed = RequestRecord("cfg", "c=2", 1, 0.0, False, error="timeout", e2e_s=0.05)
    records = [fast, slow_start, stall, single, failed]
    cases = {
        GoodputSLO(ttft_ms=200): 3,  # all but slow_start (the failed request never counts)
        GoodputSLO(tpot_ms=50): 3,  # all but stall
        GoodputSLO(itl_ms=100): 3,  # all but stall
        GoodputSLO(e2e_ms=450): 3,  # all but slow_start
        GoodputSLO(ttft_ms=200, tpot_ms=50): 2,
        GoodputSLO.from_mapping({"ttft": 200, "tpot": 50, "e2el": 450}): 2,  # vLLM's names
        GoodputSLO(ttft_ms=50): 0,
    }
    for slo, good in cases.items():
        s = _summary(records, slo, wall=4.0)
        assert (s.good_requests, s.goodput_rps) == (good, pytest.approx(good / 4.0)), slo
        assert s.requests_per_s == pytest.approx(1.0)  # 4 successful / 4 s


def test_summary_without_successes_has_no_cost() -> None:
    bad = RequestRecord("cfg", "c=1", 0, 0.0, False, error="timeout")
    s = summarize_level(
        [bad],
        config="cfg",
        level="c=1",
        mode="closed",
        concurrency=1,
        rate_rps=None,
        wall_s=1.0,
        price_per_hour=1.0,
        slo=GoodputSLO(ttft_ms=100),
    )
    assert s.successes == 0 and s.cost_per_1m_tokens_usd is None and s.get("ttft_s_p50") is None
    assert s.get("itl_s_p50") is None and s.requests_per_s == 0.0 and s.goodput_rps == 0.0
