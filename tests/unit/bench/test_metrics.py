"""Per-request figures and per-level summaries (DESIGN §5 definitions)."""

from __future__ import annotations

import numpy as np
import pytest

from llmhost.bench.metrics import RequestRecord, percentile, summarize_level


def _ok(ttft: float, e2e: float, tokens: int, prompt: int = 10, warmup: bool = False) -> RequestRecord:
    rec = RequestRecord("cfg", "c=2", 0, 0.0, warmup, prompt_tokens=prompt)
    rec.finish_ok(ttft, e2e, tokens)
    return rec


def test_request_figures() -> None:
    rec = _ok(0.1, 1.0, 10)
    assert rec.itl_s == pytest.approx(0.9 / 9)
    assert rec.ms_per_token == pytest.approx(100.0)
    one = _ok(0.1, 0.1, 1)
    assert one.itl_s is None and one.ms_per_token == pytest.approx(100.0)


@pytest.mark.parametrize("q", [0, 50, 90, 99, 100])
def test_percentile_matches_numpy(q: int) -> None:
    values = [0.3, 0.1, 0.7, 0.2, 0.9, 0.5, 0.4]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], q) is None


def test_summarize_level() -> None:
    records = [_ok(0.1, 1.0, 10), _ok(0.2, 1.2, 10), _ok(0.1, 1.0, 10, warmup=True)]
    bad = RequestRecord("cfg", "c=2", 1, 0.0, False, error="http_429")
    records.append(bad)
    s = summarize_level(
        records, config="cfg", level="c=2", mode="closed", concurrency=2, rate_rps=None, wall_s=2.0,
        price_per_hour=1.52, discount=0.1,
    )  # fmt: skip
    assert s.requests == 3 and s.successes == 2
    assert s.success_pct == pytest.approx(200 / 3)
    assert s.errors == {"http_429": 1}
    assert s.output_tokens_per_s == pytest.approx(10.0)  # 20 tokens / 2 s, warm-up excluded
    assert s.input_tokens_per_s == pytest.approx(10.0)
    assert s.requests_per_s == pytest.approx(1.5)
    assert s.get("ttft_s_p50") == pytest.approx(0.15)
    itl_p50 = (0.9 / 9 + 1.0 / 9) / 2
    assert s.get("itl_s_p50") == pytest.approx(itl_p50)
    assert s.minutes_per_1m_tokens == pytest.approx(1e6 / 10 / 60)
    assert s.cost_per_1m_tokens_usd == pytest.approx(1.52 * 1e6 / 10 / 3600)
    assert s.total_tokens_per_s_blended == pytest.approx(2 / itl_p50)
    assert s.blended_price_per_1m_tokens_usd == pytest.approx(0.9 * 1.52 / (2 / itl_p50 * 3600 / 1e6) / 4)
    row = s.flat()
    assert row["errors_http_429"] == 1 and row["ttft_s_p50"] == pytest.approx(0.15)


def test_summary_without_successes_has_no_cost() -> None:
    bad = RequestRecord("cfg", "c=1", 0, 0.0, False, error="timeout")
    s = summarize_level(
        [bad], config="cfg", level="c=1", mode="closed", concurrency=1, rate_rps=None, wall_s=1.0,
        price_per_hour=1.0,
    )  # fmt: skip
    assert s.successes == 0 and s.cost_per_1m_tokens_usd is None and s.get("ttft_s_p50") is None
