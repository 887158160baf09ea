"""The console's routes over ASGI: the page and its assets, the series and window figures, the reports
folder (listing, reading, traversal refused, one-time tickets), the key rule, and the front-door counter
that never counts the console's own requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse

from llmhost.console.api import PUBLIC_PATHS, ConsoleSettings, create_console
from llmhost.console.front import FrontCounter, FrontTally, console_families
from llmhost.console.timeseries import NAMES, Point, SeriesStore
from llmhost.web.auth import OPEN_PATHS, ApiKeyMiddleware, ApiKeys

# A ticket is URL-safe base64, which has no '.', so this key can never turn up in one by chance (a short
# key such as "k1" does, about once in 130 runs).
KEY = "key.for-the-console"


async def overview(_: Request) -> dict[str, Any]:
    return {"kind": "server", "name": "m"}


def app_with(
    store: SeriesStore,
    settings: ConsoleSettings,
    keys: ApiKeys | None = None,
    tally: FrontTally | None = None,
) -> FastAPI:
    app = FastAPI()
    app.include_router(create_console(store, settings, overview))

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse({"ok": True}, status_code=int(body.get("status", 200)))

    if keys is not None:
        app.add_middleware(ApiKeyMiddleware, keys=keys, open_paths=OPEN_PATHS | PUBLIC_PATHS)
    if tally is not None:
        app.add_middleware(FrontCounter, tally=tally)
    return app


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def store_with_points(now: float) -> SeriesStore:
    store = SeriesStore(period_s=5, retention_s=60)
    for i in range(3):
        point = Point(t=now - 10 + 5 * i, period_s=5, copies=1, invocations=i + 1, output_tokens=10)
        store.record("a", point)
    return store


async def test_page_and_assets_come_from_the_package() -> None:
    async with client(app_with(SeriesStore(), ConsoleSettings())) as c:
        page = await c.get("/console")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        for src in ("/console/assets/uPlot.iife.min.js", "/console/assets/console.js"):
            assert f'src="{src}"' in page.text
            r = await c.get(src)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
        assert "MIT" in (await c.get("/console/assets/uPlot.LICENSE")).text
        assert (await c.get("/console/assets/../api.py")).status_code == 404
        assert (await c.get("/console/assets/evil.js")).status_code == 404


async def test_series_and_window_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1000.0
    monkeypatch.setattr("llmhost.console.api.time.time", lambda: now)
    async with client(app_with(store_with_points(now), ConsoleSettings())) as c:
        body = (await c.get("/console/api/series")).json()
        a = body["components"]["a"]
        assert a["t"] == [990.0, 995.0, 1000.0] and set(a["series"]) == set(NAMES)
        assert a["series"]["Invocations"] == [1, 2, 3] and a["series"]["OutputTokensPerSecond"] == [2, 2, 2]
        newer = (await c.get("/console/api/series", params={"since": 995})).json()["components"]["a"]
        assert newer["t"] == [1000.0]
        window = (await c.get("/console/api/metrics", params={"window": 7})).json()
        assert window["components"]["a"]["figures"]["Invocations"] == 2 + 3
        assert window["units"]["ModelLatency"] == "Milliseconds"
        overview_body = (await c.get("/console/api/overview")).json()
        assert overview_body["console"]["period_s"] == 5 and overview_body["console"]["reports"] is False
        assert [m["name"] for m in overview_body["console"]["metrics"]] == list(NAMES)
        bad = (({"window": 0}, "window"), ({"window": 61}, "window"), ({"window": "x"}, "window"))
        for params, field in bad:
            r = await c.get("/console/api/metrics", params=params)
            assert r.status_code == 422 and r.json()["error"]["field"] == field
        r = await c.get("/console/api/series", params={"since": "nan"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "since"


def test_prometheus_families_name_the_series_as_cloudwatch_does() -> None:
    families = list(console_families(store_with_points(1000.0)))
    samples = {(s.labels["name"], s.labels["unit"]): s.value for s in families[0].samples}
    assert samples[("Invocations", "Count")] == 3
    assert ("ModelLatency", "Milliseconds") not in samples  # nothing timed: no sample rather than a 0
    assert families[1].samples[0].value == 5


def write_reports(root: Path) -> None:
    bench = root / "bench-1"
    bench.mkdir(parents=True)
    (bench / "summary.json").write_text(json.dumps({"configs": []}))
    (bench / "report.html").write_text("<html><body>bench report</body></html>")
    (bench / "notes.bin").write_bytes(b"\0")
    tune = root / "group" / "tune-1"
    tune.mkdir(parents=True)
    (tune / "tune.json").write_text("{}")
    (root / "stray").mkdir()
    (root.parent / "secret.json").write_text('{"secret": 1}')


async def test_reports_are_listed_and_read_inside_the_folder_only(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    write_reports(root)
    async with client(app_with(SeriesStore(), ConsoleSettings(reports_dir=root))) as c:
        listing = (await c.get("/console/api/reports")).json()
        found = {r["name"]: r for r in listing["reports"]}
        assert set(found) == {"bench-1", "group/tune-1"}
        assert found["bench-1"]["kind"] == "bench" and found["bench-1"]["report"] == "bench-1/report.html"
        assert found["bench-1"]["files"] == ["bench-1/report.html", "bench-1/summary.json"]
        assert found["group/tune-1"]["kind"] == "tune" and found["group/tune-1"]["report"] is None
        r = await c.get("/console/api/reports/bench-1/summary.json")
        assert r.status_code == 200 and r.json() == {"configs": []}
        assert "sandbox" in r.headers["content-security-policy"]
        for bad in ("../secret.json", "bench-1/../../secret.json", "%2e%2e/secret.json"):
            assert (await c.get(f"/console/api/reports/{bad}")).status_code == 404, bad
        assert (await c.get("/console/api/reports/bench-1/notes.bin")).status_code == 422
        assert (await c.get("/console/api/reports/bench-1/none.json")).status_code == 404


async def test_a_report_opens_in_a_frame_by_a_one_time_ticket(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    write_reports(root)
    app = app_with(SeriesStore(), ConsoleSettings(reports_dir=root), keys=ApiKeys.of([KEY]))
    async with client(app) as c:
        opened = await c.post("/console/api/reports/open", json={"path": "bench-1/report.html"})
        assert opened.status_code == 401
        auth = {"Authorization": f"Bearer {KEY}"}
        r = await c.post("/console/api/reports/open", json={"path": "bench-1/report.html"}, headers=auth)
        url = r.json()["url"]
        assert url.startswith("/console/view?ticket=") and KEY not in url
        first = await c.get(url)  # no key: the frame cannot send one
        assert first.status_code == 200 and "bench report" in first.text
        assert first.headers["content-security-policy"].startswith("sandbox allow-scripts")
        assert (await c.get(url)).status_code == 404  # used once
        r = await c.post("/console/api/reports/open", json={"path": "../secret.json"}, headers=auth)
        assert r.status_code == 404
        r = await c.post("/console/api/reports/open", json={}, headers=auth)
        assert r.status_code == 422 and r.json()["error"]["field"] == "path"


async def test_no_reports_folder() -> None:
    async with client(app_with(SeriesStore(), ConsoleSettings())) as c:
        assert (await c.get("/console/api/reports")).json() == {"dir": None, "reports": []}
        assert (await c.get("/console/api/reports/x.json")).status_code == 404


async def test_with_keys_the_page_opens_and_the_api_needs_one() -> None:
    app = app_with(SeriesStore(), ConsoleSettings(), keys=ApiKeys.of(["k1"]))
    async with client(app) as c:
        assert (await c.get("/console")).status_code == 200
        assert (await c.get("/console/assets/console.js")).status_code == 200
        for path in (
            "/console/api/overview",
            "/console/api/series",
            "/console/api/metrics",
            "/console/api/reports",
        ):
            assert (await c.get(path)).status_code == 401, path
            assert (await c.get(path, headers={"Authorization": "Bearer k1"})).status_code == 200, path
        assert (await c.get("/console/api/series", headers={"x-api-key": "wrong"})).status_code == 401


async def test_the_console_never_counts_as_an_invocation() -> None:
    tally = FrontTally()
    async with client(app_with(SeriesStore(), ConsoleSettings(), tally=tally)) as c:
        for path in (
            "/console",
            "/console/api/series",
            "/console/api/overview",
            "/console/assets/console.js",
        ):
            await c.get(path)
        assert tally.responses == {} and tally.timed == 0
        await c.post("/v1/completions", json={})
        await c.post("/v1/completions", json={"status": 429})
        await c.post("/v1/completions", json={"status": 500})
    reading = tally.reading()
    assert dict(reading.responses) == {200: 1, 429: 1, 500: 1}
    assert reading.timed == 3 and reading.latency_s == reading.model_latency_s > 0
    assert reading.in_flight == 0


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="period"):
        ConsoleSettings(period_s=0)
    with pytest.raises(ValueError, match="retention"):
        ConsoleSettings(period_s=10, retention_s=5)
