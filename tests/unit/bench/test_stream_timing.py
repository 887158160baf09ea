"""Metric definitions against a real streaming server with known timings (fake_server.py): first
event after 200 ms, then one event every 50 ms carrying 2 tokens each — 10 tokens in 5 events.

By hand: TTFT 200 ms; 4 ITL gaps of 50 ms per request (one per event, as vLLM); TPOT (last event −
first event) / (tokens − 1) = 200 ms / 9 = 22.2 ms per token; E2E 400 ms. Timings on a loaded machine
only come out late, never early (the server cannot send before its schedule), so lower bounds are
tight and upper bounds generous; the structure (how many gaps, which figure is larger) is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmhost.bench import BenchConfig, run_benchmark
from llmhost.bench.figures.metrics import RequestRecord, summarize_level
from llmhost.bench.figures.slo import GoodputSLO

TTFT, GAP, TOKENS, PER_EVENT = 0.2, 0.05, 10, 2
EVENTS = TOKENS // PER_EVENT
TPOT = (EVENTS - 1) * GAP / (TOKENS - 1)
E2E = TTFT + (EVENTS - 1) * GAP
SLACK = 0.15  # what a loaded 2-core machine may add to one timing
# asyncio runs a timer up to its clock resolution early, so a server's sleeps may end a hair short
EARLY = 0.98
HEADERS = {"X-Fake-TTFT": str(TTFT), "X-Fake-ITL": str(GAP), "X-Fake-Tokens-Per-Event": str(PER_EVENT)}


@pytest.fixture(scope="module")
def measured(fake_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[RequestRecord], float]:
    out = tmp_path_factory.mktemp("timing")
    cfg = BenchConfig(
        url=fake_url,
        api="openai",
        concurrency=[2],
        requests=4,
        prompt_tokens=8,
        max_new_tokens=TOKENS,
        headers=HEADERS,
        server_metrics=False,
    )
    (lv,) = run_benchmark(cfg, out).levels()
    assert lv.successes == 4, lv.errors
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [RequestRecord(**json.loads(line)) for line in lines], lv.wall_s


def test_per_request_figures(measured: tuple[list[RequestRecord], float]) -> None:
    records, _ = measured
    for r in records:
        assert r.output_tokens == TOKENS and r.tokens_counted_by == "server"  # usage, not events
        assert r.token_events == EVENTS and len(r.itl_gaps_s) == EVENTS - 1  # one gap per event
        assert r.ttft_s is not None and EARLY * TTFT <= r.ttft_s < TTFT + SLACK
        assert r.e2e_s is not None and EARLY * E2E <= r.e2e_s < E2E + SLACK
        # the gaps add up to last − first event, which TPOT spreads over tokens − 1
        assert sum(r.itl_gaps_s) == pytest.approx((r.tpot_s or 0) * (TOKENS - 1), abs=1e-5)
        assert r.tpot_s is not None and TPOT - 0.01 < r.tpot_s < TPOT + SLACK / (TOKENS - 1)
        assert r.ms_per_token == pytest.approx(1000 * r.e2e_s / TOKENS)


def test_level_distributions(measured: tuple[list[RequestRecord], float]) -> None:
    records, wall = measured
    s = summarize_level(
        records,
        config="run",
        level="c=2",
        mode="closed",
        concurrency=2,
        rate_rps=None,
        wall_s=wall,
        price_per_hour=None,
    )
    itl_p50, tpot_p50 = s.get("itl_s_p50"), s.get("tpot_s_p50")
    assert itl_p50 is not None and GAP - 0.01 < itl_p50 < GAP + 0.04
    assert tpot_p50 is not None and TPOT - 0.01 < tpot_p50 < TPOT + 0.02
    assert itl_p50 > 1.8 * tpot_p50  # two tokens per gap: ITL per event, TPOT per token
    assert s.requests_per_s == pytest.approx(4 / wall)


@pytest.mark.parametrize(
    ("bounds", "good"),
    [
        ({"ttft": 1000, "tpot": 500, "itl": 1000, "e2e": 5000}, 4),
        ({"ttft": 100}, 0),  # TTFT is at least 200 ms
        ({"tpot": 5}, 0),  # TPOT about 22 ms
        ({"itl": 30}, 0),  # gaps of 50 ms
        ({"e2el": 300}, 0),  # E2E at least 400 ms
        ({"ttft": 1000, "e2el": 5000}, 4),
    ],
)
def test_goodput_on_measured_requests(
    measured: tuple[list[RequestRecord], float], bounds: dict[str, float], good: int
) -> None:
    records, wall = measured
    s = summarize_level(
        records,
        config="run",
        level="c=2",
        mode="closed",
        concurrency=2,
        rate_rps=None,
        wall_s=wall,
        price_per_hour=None,
        slo=GoodputSLO.from_mapping(bounds),
    )
    assert s.good_requests == good and s.goodput_rps == pytest.approx(good / wall)


def test_saturation_stops_rising_load(fake_url_serial: str, tmp_path: Path) -> None:
    # one stream at a time: concurrency 2 doubles latency for the same throughput. Answers of 30 tokens
    # (0.65 s each): the client's gap between two requests at c=1, which c=2 hides, stays well under the
    # 20 % gain on a loaded machine (with 10-token answers, 0.25 s each, it did not once under make test)
    cfg = BenchConfig(
        url=fake_url_serial,
        concurrency=[1, 2, 4, 8],
        requests=4,
        prompt_tokens=4,
        max_new_tokens=30,
        saturation_gain=0.2,
        server_metrics=False,
    )
    results = run_benchmark(cfg, tmp_path)
    [config] = results.configs
    assert [lv.level for lv in config.levels] == ["c=1", "c=2"]
    assert config.stopped == "saturated" and config.saturated_at == "c=2"
    assert config.skipped_levels == ["c=4", "c=8"]
    assert config.stop_detail.startswith("c=2: output tok/s")
    assert config.stop_detail.endswith("skipped c=4, c=8")
    saved = json.loads((tmp_path / "summary.json").read_text())["configs"][0]
    assert saved["stopped"] == "saturated" and saved["skipped_levels"] == ["c=4", "c=8"]
    assert "saturated: c=2" in (tmp_path / "report.html").read_text()
