"""Server-side figures from a target's Prometheus /metrics: parsing (llmhost, llama-server, an
endpoint's labelled copies), a scrape against a real server, and a target without /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
from pathlib import Path

import pytest

from llmhost.bench import BenchConfig, run_benchmark
from llmhost.bench.load import server_metrics
from llmhost.bench.load.http import Endpoint
from llmhost.bench.load.server_metrics import MetricsProbe, parse_scrape, summarize_scrapes

LLAMA_SERVER = """# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {predicted}
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode counter
llamacpp:n_busy_slots_per_decode 1.5
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds nan
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio {kv}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {running}
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred {deferred}
"""

ENDPOINT = """# TYPE llmhost_endpoint_waiting gauge
llmhost_endpoint_waiting{{component="m"}} {router_waiting}
# TYPE llmhost_num_requests_waiting gauge
llmhost_num_requests_waiting{{component="m",copy="m-0"}} {w0}
llmhost_num_requests_waiting{{component="m",copy="m-1"}} {w1}
# TYPE llmhost_kv_cache_used_tokens gauge
llmhost_kv_cache_used_tokens{{component="m",copy="m-0"}} 30.0
llmhost_kv_cache_used_tokens{{component="m",copy="m-1"}} 10.0
# TYPE llmhost_kv_cache_capacity_tokens gauge
llmhost_kv_cache_capacity_tokens{{component="m",copy="m-0"}} 100.0
llmhost_kv_cache_capacity_tokens{{component="m",copy="m-1"}} 100.0
# TYPE llmhost_kv_cache_usage_ratio gauge
llmhost_kv_cache_usage_ratio{{component="m",copy="m-0"}} 0.3
llmhost_kv_cache_usage_ratio{{component="m",copy="m-1"}} 0.1
# TYPE llmhost_prefix_cache_lookups_total counter
llmhost_prefix_cache_lookups_total{{component="m",copy="m-0"}} {l0}
llmhost_prefix_cache_lookups_total{{component="m",copy="m-1"}} {l1}
# TYPE llmhost_prefix_cache_hits_total counter
llmhost_prefix_cache_hits_total{{component="m",copy="m-0"}} {h0}
llmhost_prefix_cache_hits_total{{component="m",copy="m-1"}} {h1}
# TYPE llmhost_e2e_request_latency_seconds histogram
llmhost_e2e_request_latency_seconds_bucket{{component="m",copy="m-0",le="+Inf"}} {l0}
llmhost_e2e_request_latency_seconds_sum{{component="m",copy="m-0"}} {l0}
llmhost_e2e_request_latency_seconds_count{{component="m",copy="m-0"}} {l0}
"""


def test_llama_server_names() -> None:
    before = LLAMA_SERVER.format(predicted=100, kv=0.0, running=0, deferred=0)
    during = [
        LLAMA_SERVER.format(predicted=150, kv=0.5, running=4, deferred=2),
        LLAMA_SERVER.format(predicted=200, kv=0.7, running=4, deferred=6),
    ]
    after = LLAMA_SERVER.format(predicted=228, kv=0.1, running=0, deferred=0)
    figures, raw = summarize_scrapes(before, during, after)
    assert figures == pytest.approx(
        {
            "server_generation_tokens": 128.0,
            "server_queue_depth_mean": 4.0,
            "server_queue_depth_max": 6.0,
            "server_running_mean": 4.0,
            "server_running_max": 4.0,
            "server_kv_usage_mean": 0.6,
            "server_kv_usage_max": 0.7,
        }
    )
    assert raw["scrapes"] == 4
    assert raw["counters"] == {"llamacpp:tokens_predicted_total": 128.0}
    # an average that llama-server types as a counter is read as a gauge; a NaN gauge is skipped
    assert raw["gauges"]["llamacpp:n_busy_slots_per_decode"] == {"mean": 1.5, "max": 1.5}
    assert "llamacpp:predicted_tokens_seconds" not in raw["gauges"]


def test_endpoint_copies_add_up_and_ratios_average() -> None:
    def text(l0: int, l1: int, h0: int, h1: int, w0: int, w1: int, router_waiting: int) -> str:
        return ENDPOINT.format(l0=l0, l1=l1, h0=h0, h1=h1, w0=w0, w1=w1, router_waiting=router_waiting)

    figures, raw = summarize_scrapes(
        text(10, 10, 2, 2, 0, 0, 0), [text(14, 16, 3, 5, 1, 2, 3)], text(20, 20, 5, 7, 0, 0, 0)
    )
    assert figures["server_prefix_cache_hit_rate"] == pytest.approx(8 / 20)  # both copies' deltas
    assert figures["server_queue_depth_max"] == 6.0  # router's queue + each copy's
    assert figures["server_kv_usage_max"] == pytest.approx(40 / 200)  # from cells, over copies
    assert raw["gauges"]["llmhost_kv_cache_usage_ratio"]["max"] == pytest.approx(0.2)  # averaged
    assert raw["counters"]["llmhost_e2e_request_latency_seconds_count"] == 10.0
    assert not any(k.endswith("_bucket") for k in raw["counters"])


def test_a_counter_reset_gives_no_figure() -> None:
    before = LLAMA_SERVER.format(predicted=500, kv=0, running=0, deferred=0)
    after = LLAMA_SERVER.format(predicted=20, kv=0, running=0, deferred=0)  # the server restarted
    figures, raw = summarize_scrapes(before, [], after)
    assert "server_generation_tokens" not in figures and raw["counters"] == {}
    assert raw["scrapes"] == 2 and figures["server_queue_depth_max"] == 0.0  # before and after only


def test_not_the_exposition_format() -> None:
    with pytest.raises(ValueError):
        parse_scrape("<html><body>Not Found</body></html>")


async def test_probe_of_a_target_without_metrics(fake_url: str) -> None:
    # the plain fake answers /metrics with 404, /v1/models with JSON: neither is an error
    for path in ("/metrics", "/v1/models"):
        probe = MetricsProbe(Endpoint.parse(fake_url), path, {}, 0.05)
        await probe.begin()
        assert probe.available is False
        assert await probe.end() == ({}, {})
        await probe.begin()  # not asked again
        assert await probe.end() == ({}, {})


def test_run_without_metrics_has_no_server_figures(fake_url: str) -> None:
    cfg = BenchConfig(
        url=fake_url,
        concurrency=[1],
        requests=2,
        prompt_tokens=4,
        max_new_tokens=3,
        headers={"X-Fake-TTFT": "0.001", "X-Fake-ITL": "0.001"},
    )
    (lv,) = run_benchmark(cfg).levels()
    assert lv.successes == 2 and lv.server_figures == {} and lv.server_metrics == {}


def test_run_scrapes_the_server_before_during_and_after(fake_url_metrics: str, tmp_path: Path) -> None:
    # 8 requests of 40 tokens at concurrency 4 against llmhost's own ServerMetrics (fake_server.py):
    # every 2nd prefix-cache lookup hits, 3 of 4 drafted tokens are accepted, 2 requests run at once
    # and the others wait, each holds 10 of 100 KV cells
    cfg = BenchConfig(
        url=fake_url_metrics,
        concurrency=[4],
        requests=8,
        warmup=1,
        prompt_tokens=8,
        max_new_tokens=40,
        metrics_interval_s=0.05,
        price_per_hour=1.0,
    )
    results = run_benchmark(cfg, tmp_path)
    (lv,) = results.levels()
    assert lv.successes == 8
    fig = lv.server_figures
    assert fig["server_prefix_cache_hit_rate"] == pytest.approx(0.5)  # warm-up request excluded
    assert fig["server_spec_acceptance_rate"] == pytest.approx(0.75)
    assert fig["server_generation_tokens"] == lv.output_tokens == 8 * 40
    assert fig["server_queue_depth_max"] == 2.0 and fig["server_running_max"] == 2.0
    assert fig["server_kv_usage_max"] == pytest.approx(0.4)
    assert 0.0 <= fig["server_queue_depth_mean"] <= 2.0
    raw = lv.server_metrics
    assert raw["counters"]["llmhost_prefix_cache_lookups_total"] == 8.0
    assert raw["scrapes"] >= 3 and raw["gauges"]["llmhost_num_requests_waiting"]["max"] == 2.0
    saved = json.loads((tmp_path / "summary.json").read_text())["configs"][0]["levels"][0]
    assert saved["server_figures"]["server_spec_acceptance_rate"] == pytest.approx(0.75)
    (row,) = csv.DictReader((tmp_path / "summary.csv").open())
    assert float(row["server_prefix_cache_hit_rate"]) == pytest.approx(0.5)
    html = (tmp_path / "report.html").read_text()
    assert "<h2>Server metrics</h2>" in html and "speculative acceptance" in html


async def test_stop_ends_the_scraping_when_a_scrape_swallows_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python 3.11's asyncio.wait_for (under every scrape) returns the scrape's result and drops a
    cancellation that lands as the scrape completes: stop() must end the scraping all the same."""
    exposition = "# TYPE llmhost_x counter\nllmhost_x_total 1\n"

    async def swallowing(*_: object) -> str:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)
        return exposition

    monkeypatch.setattr(server_metrics, "fetch_text", swallowing)
    probe = MetricsProbe(Endpoint.parse("http://127.0.0.1:9"), "/metrics", {}, 0.001)
    await probe.begin()
    await asyncio.sleep(0.02)  # the scraping task is inside a scrape now
    await asyncio.wait_for(probe.stop(), 5)
