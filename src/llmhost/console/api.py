"""`GET /console` and its JSON API, the same for an endpoint and a lone server: the page and its assets
come from the package (no CDN), the figures from the server's own series store.

The page and its assets carry no data and open without a key (so that the page can ask for one); every
`/console/api/...` route is protected like the rest of the server. The console's requests are never
invocations: they reach neither a copy nor the counters the series are made of.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response

from llmhost.console import apidoc as doc
from llmhost.console.reports import MEDIA as REPORT_MEDIA
from llmhost.console.reports import ReportError, list_reports, read_report
from llmhost.console.timeseries import METRICS, NAMES, SeriesStore, refusals, summarize
from llmhost.errors import NotFoundError
from llmhost.shared.jsontypes import JSONObject, JSONValue
from llmhost.web.apidoc import BODY, COMMON, errors, merge, operation
from llmhost.web.errors import error_body

PREFIX = "/console"
# the page's files: name -> media type (anything else under /console/assets is a 404)
ASSETS = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "uPlot.LICENSE": "text/plain; charset=utf-8",
}
VIEW = f"{PREFIX}/view"  # a report opened in the page's frame, by a one-time ticket (never the key)
TICKET_TTL_S = 60.0
# what opens without an API key: the page and its assets, which hold no data, and a report by ticket
PUBLIC_PATHS = frozenset({PREFIX, f"{PREFIX}/", VIEW, *(f"{PREFIX}/assets/{name}" for name in ASSETS)})
# a report runs in its own sandbox (an opaque origin: it reaches neither the page nor the API)
REPORT_CSP = (
    "sandbox allow-scripts; default-src 'none'; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; img-src data:"
)
# the page loads nothing from elsewhere, runs only its own scripts, and is framed by no one
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-src 'self'; connect-src 'self'; frame-ancestors 'none'"
)


@dataclass(frozen=True)
class ConsoleSettings:
    period_s: float = 5.0  # a point every period
    retention_s: float = 900.0  # kept in the server
    reports_dir: Path | None = None  # `--reports DIR`: bench and tune results listed in the console

    def __post_init__(self) -> None:
        if not 0.05 <= self.period_s <= 300:
            raise ValueError(f"console period must be in [0.05, 300] seconds, got {self.period_s}")
        if self.retention_s < self.period_s:
            raise ValueError(f"console retention must be >= its period, got {self.retention_s}")
        if self.reports_dir is not None and not self.reports_dir.is_dir():
            raise ValueError(f"reports {self.reports_dir}: not a folder")

    def store(self) -> SeriesStore:
        return SeriesStore(self.period_s, self.retention_s)


Overview = Callable[[Request], Awaitable[dict[str, Any]]]


def _asset(name: str) -> bytes:
    return (resources.files("llmhost.console") / "static" / name).read_bytes()


def _bad(field: str, message: str) -> JSONResponse:
    return JSONResponse(error_body(422, message, field=field), status_code=422)


def _number(request: Request, name: str, default: float) -> float | JSONResponse:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        return _bad(name, f"{name} must be a number, got {raw!r}")
    if not math.isfinite(value):
        return _bad(name, f"{name} must be finite, got {raw!r}")
    return value


class ComponentPoints(TypedDict):
    """A component's points (console/apidoc.py's ComponentSeries)."""

    t: list[float]
    period_s: list[float]
    series: dict[str, list[float | None]]
    refusals: list[dict[str, float]]


class SeriesBody(TypedDict):
    now: float
    period_s: float
    components: dict[str, ComponentPoints]


def series_body(store: SeriesStore, since: float) -> SeriesBody:
    """Each component's points after `since`: times, and one list per series (None: nothing to say)."""
    out: dict[str, ComponentPoints] = {}
    for name in store.components():
        points = store.points(name, since)
        figures = [summarize([p]) for p in points]
        out[name] = {
            "t": [p.t for p in points],
            "period_s": [p.period_s for p in points],
            "series": {m: [f[m] for f in figures] for m in NAMES},
            "refusals": [p.refusals for p in points],
        }
    return {"now": time.time(), "period_s": store.period_s, "components": out}


def _query(name: str, description: str, **schema: JSONValue) -> JSONObject:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "number", **schema},
    }


def _declarations(store: SeriesStore) -> dict[str, JSONObject]:
    """The API's `openapi_extra`, by route: what each takes and answers (the page and its assets are for
    browsers and stay out of the document)."""
    bad = merge(COMMON, errors(422))
    window = _query(
        "window",
        f"Seconds (default 300), at most the retention ({store.retention_s:g})",
        exclusiveMinimum=0,
        maximum=store.retention_s,
    )
    since = _query("since", "Only the points after this Unix time (default: all of them)")
    files = {m.split(";")[0]: "A file of a report, as it is" for m in REPORT_MEDIA.values()}
    files.pop("application/json")  # a JSON file: any JSON value (ReportJSON)
    return {
        "overview": operation(
            "The server or endpoint, its host and components, the console's settings",
            success=doc.ConsoleOverview,
            errors=COMMON,
        ),
        "series": operation(
            "Each component's time series", success=doc.ConsoleSeries, errors=bad, params=[since]
        ),
        "metrics": operation(
            "Each component's figures over a window", success=doc.ConsoleMetrics, errors=bad, params=[window]
        ),
        "reports": operation(
            "The bench and tune results in the reports folder (--reports DIR)",
            success=doc.ConsoleReports,
            errors=COMMON,
        ),
        "report": operation(
            "A file of a report (404 without --reports, 422: not a file a report shows)",
            success=doc.ReportJSON,
            media=files,
            errors=merge(COMMON, errors(404, 422)),
        ),
        "open": operation(
            "A one-time URL opening a report file without the key (in the page's frame)",
            body=[doc.OpenReport],
            success=doc.Ticket,
            errors=merge(BODY, errors(404)),
        ),
    }


def create_console(
    store: SeriesStore, settings: ConsoleSettings, overview: Overview, key_required: bool = False
) -> APIRouter:
    """The page, its assets and its API; `overview` says what the page shows beside the charts.
    `key_required`: the page asks for the key before its first call (a browser logs every 401)."""
    router = APIRouter(prefix=PREFIX)
    page = _asset("console.html")
    if key_required:
        page = page.replace(b"<body>", b'<body data-key-required="1">', 1)
    docs = _declarations(store)
    _page_routes(router, page)
    _figure_routes(router, store, settings, overview, docs)
    _report_routes(router, settings.reports_dir, docs)
    return router


def _page_routes(router: APIRouter, page: bytes) -> None:
    """The page and its assets (for browsers: out of the OpenAPI document)."""

    @router.get("", include_in_schema=False)
    @router.get("/", include_in_schema=False)
    async def console_page() -> Response:
        headers = {"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-store"}
        return Response(page, media_type="text/html; charset=utf-8", headers=headers)

    @router.get("/assets/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in ASSETS:
            return JSONResponse(error_body(404, f"no console asset {name!r}", "not_found_error"), 404)
        return Response(_asset(name), media_type=ASSETS[name], headers={"Cache-Control": "max-age=3600"})


def _figure_routes(
    router: APIRouter,
    store: SeriesStore,
    settings: ConsoleSettings,
    overview: Overview,
    docs: dict[str, JSONObject],
) -> None:
    """/api/overview, /api/series and /api/metrics: what the page shows."""

    @router.get("/api/overview", openapi_extra=docs["overview"])
    async def overview_route(request: Request) -> Response:
        body = await overview(request)
        body["console"] = {
            "period_s": store.period_s,
            "retention_s": store.retention_s,
            "reports": settings.reports_dir is not None,
            "metrics": [vars(m) for m in METRICS],
        }
        return JSONResponse(body)

    @router.get("/api/series", openapi_extra=docs["series"])
    async def series(request: Request) -> Response:
        since = _number(request, "since", -math.inf)
        return since if isinstance(since, JSONResponse) else JSONResponse(series_body(store, since))

    @router.get("/api/metrics", openapi_extra=docs["metrics"])
    async def window(request: Request) -> Response:
        seconds = _number(request, "window", 300.0)
        if isinstance(seconds, JSONResponse):
            return seconds
        if not 0 < seconds <= store.retention_s:
            return _bad("window", f"window must be in (0, {store.retention_s:g}] seconds, got {seconds:g}")
        now = time.time()
        comps = {
            n: {
                "figures": store.window(n, seconds, now),
                "refusals": refusals(store.points(n, now - seconds)),
            }
            for n in store.components()
        }
        return JSONResponse(
            {"window_s": seconds, "now": now, "units": {m.name: m.unit for m in METRICS}, "components": comps}
        )


def _report_routes(router: APIRouter, reports_dir: Path | None, docs: dict[str, JSONObject]) -> None:
    """The reports folder's runs and files (a file opens in a frame by a one-time ticket)."""
    tickets = Tickets()

    @router.get("/api/reports", openapi_extra=docs["reports"])
    async def reports() -> Response:
        if reports_dir is None:
            return JSONResponse({"dir": None, "reports": []})
        return JSONResponse({"dir": str(reports_dir), "reports": list_reports(reports_dir)})

    @router.get("/api/reports/{path:path}", openapi_extra=docs["report"])
    async def report(path: str) -> Response:
        """A report's file, for a client that sends its key (the page opens reports by ticket)."""
        return _report_file(reports_dir, path)

    @router.post("/api/reports/open", openapi_extra=docs["open"])
    async def open_report(request: Request) -> Response:
        """A one-time ticket that opens one report file in a frame, which cannot send the key."""
        try:
            path = doc.OpenReport.model_validate(await request.json()).path
        except (ValueError, ValidationError):  # not JSON, or not {"path": "..."} (strictly)
            return _bad("path", 'body must be {"path": "RUN/report.html"}')
        checked = _report_file(reports_dir, path)
        if checked.status_code != 200:
            return checked
        return JSONResponse({"url": f"{VIEW}?ticket={tickets.issue(path)}"})

    @router.get("/view", include_in_schema=False)
    async def view(ticket: str = "") -> Response:
        path = tickets.take(ticket)
        if path is None:
            return JSONResponse(error_body(404, "unknown or expired report ticket", "not_found_error"), 404)
        return _report_file(reports_dir, path)


class Tickets:
    """One-time tickets, each opening one report file within TICKET_TTL_S."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[str, float]] = {}

    def issue(self, path: str) -> str:
        now = time.monotonic()
        self._open = {t: v for t, v in self._open.items() if v[1] > now}
        token = secrets.token_urlsafe(24)
        self._open[token] = (path, now + TICKET_TTL_S)
        return token

    def take(self, token: str) -> str | None:
        path, expires = self._open.pop(token, ("", 0.0))
        return path if path and expires > time.monotonic() else None


def _report_file(root: Path | None, path: str) -> Response:
    if root is None:
        message = "no reports folder: start with --reports DIR"
        return JSONResponse(error_body(404, message, "not_found_error"), 404)
    try:
        body, media = read_report(root, path)
    except ReportError as exc:
        kind = "not_found_error" if exc.status == NotFoundError.status else "invalid_request_error"
        return JSONResponse(error_body(exc.status, str(exc), kind, field="path"), exc.status)
    return Response(
        body,
        media_type=media,
        headers={"X-Content-Type-Options": "nosniff", "Content-Security-Policy": REPORT_CSP},
    )
