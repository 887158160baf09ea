"""The console in a real browser (Debian's headless Chromium driven by Playwright; no browser download)
against a real `llmhost endpoint up` with two components and API keys on. One endpoint serves every test,
in order: the key prompt, a clean offline load, charts under load, the playground, a copy killed with
kill -9, scaling from the page, a report opened. Screenshots go to build/test-artifacts/console/."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmhost.bench.report import write_summary
from tests.integration.console_helpers import WAIT_MS, Watched, artifacts_dir, chromium, needs_chromium
from tests.integration.endpoint_helpers import ENGINE, Endpoint, start_endpoint, stop_endpoint
from tests.unit.bench.test_report import make_results

pytestmark = needs_chromium

KEY = "console-test-key"
# component a captures its requests into CAPTURE_DIR (the fixture's folder); b captures none. a serves
# the tiny model (TINY_MODEL: `tiny_model`), whose answers are noise but cheap; b the default model, slow
# enough per token that the playground's stream shows text before its end
ENDPOINT = f"""
name: console
components:
  - name: a
    model: TINY_MODEL
    copies: 1
    resources: {{num_cpus: 0.5, memory_mb: 600}}
    engine: {ENGINE[:-1]}, capture_dir: CAPTURE_DIR}}
    startup_health_check_timeout_s: 90
  - name: b
    copies: 1
    resources: {{num_cpus: 0.5, memory_mb: 600}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
"""


@pytest.fixture(scope="module")
def artifacts() -> Path:
    return artifacts_dir()


@pytest.fixture(scope="module")
def ep(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Endpoint]:
    tmp = tmp_path_factory.mktemp("console")
    reports = tmp / "results"
    write_summary(make_results(), reports / "bench-run")
    # a copy loading beside a ready one on a busy machine can miss a 1 s ping: this test kills copies itself
    health = ("--health-timeout", "5", "--health-misses", "5")
    endpoint = start_endpoint(
        tmp,
        ENDPOINT.replace("CAPTURE_DIR", json.dumps(str(tmp / "capture"))).replace(
            "TINY_MODEL", json.dumps(str(tiny_model))
        ),
        args=("--console-period", "0.5", "--reports", str(reports), "--api-key", KEY, *health),
    )
    yield endpoint
    stop_endpoint(endpoint)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def page(browser: Any, ep: Endpoint) -> Iterator[Watched]:
    w = Watched(browser, KEY)
    w.page.goto(f"{ep.url}/console")
    w.page.wait_for_selector('tr[data-copy="a-0"]', timeout=WAIT_MS)
    yield w
    w.check_clean()
    w.close()


def status(ep: Endpoint) -> dict[str, Any]:
    """`llmhost endpoint status --json`, with the key the CLI sends."""
    cmd = [sys.executable, "-m", "llmhost.cli", "endpoint", "status", "--json", "--port", str(ep.port)]
    env = {**os.environ, "LLMHOST_API_KEY": KEY}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_without_a_key_the_page_asks_for_one_then_works(browser: Any, ep: Endpoint, artifacts: Path) -> None:
    w = Watched(browser, None)
    w.page.goto(f"{ep.url}/console")
    w.page.wait_for_selector("#keybox:not([hidden])", timeout=WAIT_MS)
    assert w.page.is_hidden("#main")
    assert "requires an API key" in w.page.inner_text("#keybox")
    w.page.screenshot(path=str(artifacts / "1-key-prompt.png"), full_page=True)
    w.page.fill("#key", KEY)
    w.page.click("#keyform button")
    w.page.wait_for_selector('tr[data-copy="b-0"]', timeout=WAIT_MS)
    assert w.page.is_hidden("#keybox") and "API keys on" in w.page.inner_text("#facts")
    assert all(KEY not in url for url in w.requests)  # never in a URL
    # the page asks for the key before any call: the browser logs no refused call (nor a missing favicon)
    assert w.errors == [], w.errors
    assert w.outside == []
    w.page.screenshot(path=str(artifacts / "2-with-key.png"), full_page=True)
    w.close()
    assert KEY not in ep.log.read_text()  # nor in a log


def test_page_loads_clean_and_offline(page: Watched, ep: Endpoint, artifacts: Path) -> None:
    p = page.page
    text = p.inner_text("#facts")
    assert "uptime" in text and "reserved" in text
    assert p.inner_text('tr[data-copy="a-0"] td.state') == "ready"
    # every chart is drawn from the server's series (15 minutes kept there, not in the page)
    p.wait_for_function("() => document.querySelectorAll('.chart canvas').length >= 10", timeout=WAIT_MS)
    # the time axis is the retention window ending now, also with a single point (it spanned two years)
    retention = httpx.get(
        f"{ep.url}/console/api/overview", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    ).json()["console"]["retention_s"]
    assert float(p.get_attribute("#chart-tokens", "data-x-span") or 0) == pytest.approx(retention)
    assert any(u.endswith("/console/assets/uPlot.iife.min.js") for u in page.requests)
    p.screenshot(path=str(artifacts / "3-loaded.png"), full_page=True)


def _load(url: str, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {KEY}"}) as c:
        while not stop.is_set():
            for name in ("a", "b"):
                c.post(
                    "/v1/completions",
                    json={
                        "model": name,
                        "prompt": "Tell me",
                        "max_tokens": 12,
                        "ignore_eos": True,
                        "temperature": 0,
                    },
                )


def points(p: Any, chart: str) -> int:
    return int(p.get_attribute(f"#chart-{chart}", "data-points") or 0)


def test_charts_gain_points_while_a_load_runs(page: Watched, ep: Endpoint, artifacts: Path) -> None:
    p = page.page
    p.wait_for_selector("#chart-invocations", timeout=WAIT_MS)
    before = points(p, "invocations")
    stop = threading.Event()
    loaders = [threading.Thread(target=_load, args=(ep.url, stop)) for _ in range(2)]
    for t in loaders:
        t.start()
    try:
        for chart in ("invocations", "tokens", "cpu"):
            p.wait_for_function(
                f"() => Number(document.getElementById('chart-{chart}').dataset.last) > 0", timeout=WAIT_MS
            )
    finally:
        stop.set()
        for t in loaders:
            t.join()
    assert points(p, "invocations") > before
    p.screenshot(path=str(artifacts / "4-under-load.png"), full_page=True)
    # a copy whose /metrics was not read in time in one period has its tokens in the next point: poll
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        series = httpx.get(
            f"{ep.url}/console/api/metrics", params={"window": 120}, headers={"x-api-key": KEY}, timeout=60
        ).json()["components"]
        a, b = series["a"]["figures"], series["b"]["figures"]
        if (a["Invocations"] > 0 and b["OutputTokensPerSecond"] > 0) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert a["Invocations"] > 0 and b["OutputTokensPerSecond"] > 0, series
    metrics = httpx.get(f"{ep.url}/metrics", headers={"x-api-key": KEY}, timeout=60).text
    assert 'llmhost_console{component="a",name="Invocations",unit="Count"}' in metrics


def test_capture_shows_on_with_its_lines_and_off(page: Watched, ep: Endpoint) -> None:
    p = page.page
    # the load above went to a, whose copy captured it: its lines, read from the copy's /metrics
    on = 'div.comp[data-component="a"] p.capture[data-capture="on"]'
    p.wait_for_function(f"() => Number(document.querySelector('{on}')?.dataset.written) > 0", timeout=WAIT_MS)
    folder = ep.log.parent / "capture"
    shown = p.inner_text(on)
    assert f"100% of requests (input, output) to {folder}/a/AllTraffic/" in shown and "0 dropped" in shown
    assert p.inner_text('div.comp[data-component="b"] p.capture') == "data capture: off"
    overview = httpx.get(f"{ep.url}/console/api/overview", headers={"x-api-key": KEY}, timeout=60).json()
    a, b = (next(c for c in overview["components"] if c["name"] == n) for n in ("a", "b"))
    assert a["capture"]["destination"] == str(folder) and a["capture"]["lines_written"] > 0
    assert a["capture"]["lines_dropped"] == 0 and b["capture"] is None
    assert any(folder.rglob("*.jsonl"))


def test_playground_streams(page: Watched, artifacts: Path) -> None:
    p = page.page
    p.select_option("#pg-component", "b")
    p.fill("#pg-prompt", "The history of the city begins")
    p.fill("#pg-max", "24")
    p.click("#pg-send")
    # text shows before the answer is complete: it streams
    p.wait_for_function(
        "() => { const o = document.getElementById('pg-output'); "
        "return o.textContent.length > 0 && o.dataset.done === 'false'; }",
        timeout=WAIT_MS,
        polling=20,
    )
    p.wait_for_selector('#pg-output[data-done="true"]', timeout=WAIT_MS)
    timings = p.inner_text("#pg-timings")
    assert "time to first token" in timings and "copy b-0" in timings
    assert int(p.get_attribute("#pg-timings", "data-tokens") or 0) >= 1
    p.screenshot(path=str(artifacts / "5-playground.png"), full_page=True)


def test_a_copy_killed_shows_restarting_then_ready(page: Watched, ep: Endpoint, artifacts: Path) -> None:
    p = page.page
    [b0] = [r for c in status(ep)["components"] if c["name"] == "b" for r in c["replicas"]]
    os.kill(int(b0["pid"]), signal.SIGKILL)
    p.wait_for_selector('tr[data-copy="b-0"][data-state="restarting"]', timeout=WAIT_MS)
    p.screenshot(path=str(artifacts / "6-restarting.png"), full_page=True)
    p.wait_for_selector('tr[data-copy="b-0"][data-state="ready"]', timeout=WAIT_MS)
    assert "SIGKILL" in p.inner_text('tr[data-copy="b-0"]')  # the last reason
    assert p.inner_text('tr[data-copy="b-0"] td:nth-child(9)') == "1"  # restarts


def test_scaling_from_the_page_changes_endpoint_status(page: Watched, ep: Endpoint, artifacts: Path) -> None:
    p = page.page
    p.fill('input.scale-input[data-component="a"]', "2")
    p.click('button.scale-btn[data-component="a"]')
    p.wait_for_selector("#confirm[open]")
    assert "Scale a from 1 to 2 copies?" in p.inner_text("#confirm-text")
    p.click("#confirm-ok")
    # the page says what the admin API answered; waiting on the page also lets Playwright pass the page's
    # POST through the context's route (sync Playwright handles a route only inside one of its calls: a
    # plain sleep here held the request until the test gave up, once under make test's three workers)
    p.wait_for_selector("#messages .msg", timeout=WAIT_MS)
    assert p.inner_text("#messages .msg") == "scaling a to 2"
    ep.wait_for(
        "a at 2 copies", lambda: [c["copies"] for c in status(ep)["components"] if c["name"] == "a"] == [2]
    )
    p.wait_for_selector('tr[data-copy="a-1"][data-state="ready"]', timeout=WAIT_MS)
    p.screenshot(path=str(artifacts / "7-scaled.png"), full_page=True)


def test_a_report_opens_in_the_console(page: Watched) -> None:
    p = page.page
    p.wait_for_selector('button.report-file[data-path="bench-run/report.html"]', timeout=WAIT_MS)
    p.click('button.report-file[data-path="bench-run/report.html"]')
    frame = p.frame_locator("#report-frame")
    frame.locator("svg.chart").first.wait_for(timeout=WAIT_MS)
