"""The console of a lone `llmhost serve` (a one-component view) with API keys on: the page in a real
browser (one component, one copy, no admin actions, live charts), and its API over HTTP: the console's
own requests, probes and scrapes are never invocations, and /metrics carries the same figures."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.console_helpers import WAIT_MS, Watched, artifacts_dir, chromium, needs_chromium

KEY = "serve-console-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(
        tmp_path_factory.mktemp("serve-console"),
        "--console-period",
        "0.3",
        "--api-key",
        KEY,
        "--max-input-tokens",
        "128",
        "--max-total-tokens",
        "256",
        "--served-model-name",
        "solo",
    )
    yield s
    stop_server(s)


def figures(srv: Server) -> dict[str, Any]:
    url = f"{srv.url}/console/api/metrics"
    body = httpx.get(url, params={"window": 900}, headers=AUTH, timeout=10).json()
    return dict(body["components"]["solo"]["figures"])


def points(srv: Server) -> int:
    body = httpx.get(f"{srv.url}/console/api/series", headers=AUTH, timeout=10).json()
    return len(body["components"].get("solo", {}).get("t", []))


def wait(what: str, check: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_api_needs_the_key_and_the_page_does_not(srv: Server) -> None:
    assert httpx.get(f"{srv.url}/console", timeout=60).status_code == 200
    for path in ("/console/api/overview", "/console/api/series", "/console/api/metrics"):
        assert httpx.get(f"{srv.url}{path}", timeout=60).status_code == 401, path
    overview = httpx.get(f"{srv.url}/console/api/overview", headers=AUTH, timeout=60).json()
    assert overview["kind"] == "server" and overview["auth"] is True and overview["admin"]["allowed"] is False
    [comp] = overview["components"]
    assert comp["name"] == "solo" and [r["copy"] for r in comp["replicas"]] == ["self"]
    assert comp["capture"] is None  # no --capture-dir (tests/integration/test_capture.py has one)


def test_only_invocations_count(srv: Server) -> None:
    before = figures(srv)["Invocations"] or 0
    with httpx.Client(base_url=srv.url, headers=AUTH, timeout=120) as c:
        for _ in range(3):
            r = c.post("/v1/completions", json={"model": "solo", "prompt": "Hello", "max_tokens": 4})
            assert r.status_code == 200
        assert (
            c.post(
                "/v1/completions", json={"model": "solo", "prompt": "x", "max_tokens": 0, "temperature": -1}
            ).status_code
            == 422
        )
    wait("the four answers in the series", lambda: figures(srv)["Invocations"] == before + 4)
    after = figures(srv)
    assert after["Invocation4XXErrors"] >= 1 and after["OutputTokensPerSecond"] > 0
    # the console's own calls, probes and scrapes, then two more points: still four invocations
    for path in ("/console", "/console/api/overview", "/console/api/series", "/ping", "/metrics"):
        httpx.get(f"{srv.url}{path}", headers=AUTH, timeout=60)
    seen = points(srv)
    wait("two more points", lambda: points(srv) >= seen + 2)
    assert figures(srv)["Invocations"] == before + 4
    metrics = httpx.get(f"{srv.url}/metrics", headers=AUTH, timeout=60).text
    assert 'llmhost_console{component="solo",name="CPUUtilizationNormalized",unit="Percent"}' in metrics


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


@needs_chromium
def test_the_one_component_page(srv: Server, browser: Any) -> None:
    line = {
        "custom_id": "c",
        "method": "POST",
        "url": "/v1/completions",
        "body": {"prompt": "Hi", "max_tokens": 2},
    }
    client = OpenAI(base_url=f"{srv.url}/v1", api_key=KEY, max_retries=0)
    file_id = client.files.create(file=("b.jsonl", io.BytesIO(json.dumps(line).encode())), purpose="batch").id
    batch = client.batches.create(input_file_id=file_id, endpoint="/v1/completions", completion_window="24h")
    w = Watched(browser, KEY)
    p = w.page
    p.goto(f"{srv.url}/console")
    # the server's batches, with their progress
    p.wait_for_selector(f'tr[data-batch="{batch.id}"] >> text=completed', timeout=WAIT_MS)
    assert p.inner_text(f'tr[data-batch="{batch.id}"]').count("1 / 1")
    p.wait_for_selector('tr[data-copy="self"][data-state="ready"]', timeout=WAIT_MS)
    assert p.inner_text("#name") == "solo"
    # a lone server has no admin API: no scaling, no stopping, no adding; the playground is there
    assert p.locator(".scale-btn").count() == 0 and p.locator("#down-btn").count() == 0
    assert p.is_hidden("#add-box") and p.is_visible("#pg-send")
    assert p.inner_text('div.comp[data-component="solo"] p.capture') == "data capture: off"
    p.wait_for_function(
        "() => Number(document.getElementById('chart-mem').dataset.points) > 1", timeout=WAIT_MS
    )
    p.screenshot(path=str(artifacts_dir() / "serve-console.png"), full_page=True)
    w.check_clean()
    w.close()
