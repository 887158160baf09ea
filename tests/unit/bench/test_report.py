"""Results directory files, and report.html rendered by headless Chromium (charts drawn, no console
messages, nothing fetched from the network)."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from llmhost.bench import compare_results, load_results
from llmhost.bench.figures.metrics import RequestRecord, summarize_level
from llmhost.bench.figures.recommend import recommend
from llmhost.bench.report import write_summary
from llmhost.bench.results import BenchResults, ConfigResult

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install -y chromium)"
)


def _level(config: str, conc: int, ttft: float, itl: float, tokens: int, n: int, price: float):  # type: ignore[no-untyped-def]
    recs = []
    e2e = ttft + itl * (tokens - 1)
    for i in range(n):
        r = RequestRecord(config, f"c={conc}", i, 0.0, False, prompt_tokens=32)
        r.finish_ok([ttft + itl * k for k in range(tokens)], e2e, tokens)
        recs.append(r)
    return summarize_level(
        recs,
        config=config,
        level=f"c={conc}",
        mode="closed",
        concurrency=conc,
        rate_rps=None,
        wall_s=n * e2e / conc,
        price_per_hour=price,
    )


def make_results() -> BenchResults:
    configs = []
    for name, itl, price in (("fast", 0.01, 3.0), ("cheap", 0.03, 0.5), ("mid", 0.02, 1.0)):
        c = ConfigResult(name, "http://127.0.0.1:1", "openai", {"threads": 2}, price)
        c.levels = [_level(name, conc, 0.05 * conc, itl * (1 + conc / 8), 32, 8, price) for conc in (1, 2, 4)]
        configs.append(c)
    res = BenchResults(configs=configs, settings={"api": "openai"}, started_at="t0", finished_at="t1")
    res.recommendations = recommend(configs, slo_ms_per_token=30.0)
    return res


def chromium_dom(path: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """The DOM after load, and the page's console messages."""
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=2000",
        "--dump-dom",
        path.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


@needs_chromium
def test_chromium_harness_sees_console_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>throw new Error('boom-harness');</script></body></html>")
    _, console = chromium_dom(bad, tmp_path)
    assert any("boom-harness" in line for line in console)


@needs_chromium
def test_report_renders_charts_offline(tmp_path: Path) -> None:
    res = make_results()
    write_summary(res, tmp_path)
    dom, console = chromium_dom(tmp_path / "report.html", tmp_path)
    assert console == []
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None
    charts = int(re.search(r'data-charts="(\d+)"', body.group(0)).group(1))  # type: ignore[union-attr]
    drawn = int(re.search(r'data-charts-drawn="(\d+)"', body.group(0)).group(1))  # type: ignore[union-attr]
    assert charts == 5 and drawn == charts  # throughput, 3 latency charts, cost per configuration
    assert dom.count('<svg class="chart"') == 5
    assert dom.count('id="series-') == 4 * 3  # 4 line charts × 3 configurations
    assert dom.count('id="bar-') == 3
    assert "Most cost-effective" in dom and "Cheapest meeting SLO" in dom
    assert "http://" not in re.sub(
        r"http://127\.0\.0\.1:1|http://www\.w3\.org/(2000/svg|1999/xlink)", "", dom
    )


def test_results_files_round_trip(tmp_path: Path) -> None:
    res = make_results()
    write_summary(res, tmp_path)
    loaded = load_results(tmp_path)
    assert [c.name for c in loaded.configs] == ["fast", "cheap", "mid"]
    assert loaded.levels()[0].get("ttft_s_p50") == pytest.approx(0.05)
    assert [r.goal for r in loaded.recommendations] == [r.goal for r in res.recommendations]
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert (
        len(rows) == 9 and rows[0]["config"] == "fast" and float(rows[0]["ttft_s_p50"]) == pytest.approx(0.05)
    )


def test_recommendations() -> None:
    res = make_results()
    recs = {r.goal: r for r in res.recommendations}
    # at c=4 (highest common): cost = price / throughput; fast: 3.0/…, cheap: 0.5/…, mid: 1.0/…
    assert recs["most_cost_effective"].config == "cheap" and recs["most_cost_effective"].level == "c=4"
    assert recs["best_throughput"].config == "fast" and recs["best_throughput"].level == "c=4"
    assert recs["best_latency"].config == "fast" and recs["best_latency"].level == "c=1"
    # SLO 30 ms/token: cheap is too slow at every level; mid beats fast on cost
    assert recs["slo"].config == "mid"
    none = recommend(res.configs, slo_ttft_ms=1.0)
    assert none[-1].config is None and "no configuration meets" in none[-1].note


def test_compare_ratio(tmp_path: Path) -> None:
    a = make_results()
    b = make_results()
    for lv in b.levels():
        lv.output_tokens_per_s *= 2
    rows = {(r.config, r.level, r.metric): r for r in compare_results(a, b)}
    assert rows[("fast", "c=1", "output_tokens_per_s")].ratio == pytest.approx(2.0)
    assert rows[("fast", "c=1", "ttft_s_p50")].ratio == pytest.approx(1.0)


def test_report_escapes_hostile_names(tmp_path: Path) -> None:
    res = make_results()
    hostile = '<script>alert("x")</script>&$x$'
    res.configs[0].name = hostile
    for lv in res.configs[0].levels:
        lv.config = hostile
    res.configs[1].error = "<img src=x onerror=alert(1)>"
    write_summary(res, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert page.count("<script>") == 1  # the page's own chart check only
    assert "&lt;script&gt;alert(" in page  # in the tables, and in the chart legends (SVG text)
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_report_has_every_chart_and_section(tmp_path: Path) -> None:
    res = make_results()
    write_summary(res, tmp_path)
    page = (tmp_path / "report.html").read_text()
    for section in ("Recommendations", "Charts", "Levels", "Configurations"):
        assert f"<h2>{section}</h2>" in page
    for title in (
        "Output throughput",
        "Latency: p50 ms per token",
        "Latency: p50 TTFT",
        "Latency: p50 inter-token",
        "Cost per 1M output tokens",
    ):
        assert f'<svg class="chart" role="img" aria-label="{title}"' in page
    for chart in ("throughput", "ms-per-token", "ttft", "itl"):
        assert [page.count(f'id="series-{chart}-{i}"') for i in range(3)] == [1, 1, 1]
    assert "<h2>Server metrics</h2>" not in page  # no level has server figures
    res.configs[0].levels[0].server_figures = {"server_queue_depth_mean": 1.5}
    write_summary(res, tmp_path)
    assert "<h2>Server metrics</h2>" in (tmp_path / "report.html").read_text()


def test_report_is_deterministic(tmp_path: Path) -> None:
    write_summary(make_results(), tmp_path / "a")
    write_summary(make_results(), tmp_path / "b")
    assert (tmp_path / "a" / "report.html").read_bytes() == (tmp_path / "b" / "report.html").read_bytes()
