"""What the console's JSON API takes and answers, for the OpenAPI document: the request model that
`POST /console/api/reports/open` validates with, and the answers' shapes (open objects: a server adds
fields, a client ignores those it does not know)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel


class OpenReport(BaseModel):
    """`POST /console/api/reports/open`: the report file to open (relative to the reports folder)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    path: str = Field(description="A file of a report, e.g. RUN/report.html")


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class HostInfo(Open):
    cpus: int
    copy_cpus: list[int]
    router_cpus: list[int]
    memory_mb: int
    memory_available_mb: int


class AdminInfo(Open):
    """Whether this client may use the admin API (`why_not`: the reason it may not)."""

    allowed: bool
    why_not: str | None


class CaptureInfo(Open):
    """A component's data capture: where, how much of what, and the lines its copies wrote and dropped
    (by reason) since the console began."""

    destination: str
    location: str = Field(description="Where its files go: DESTINATION/ENDPOINT/VARIANT/")
    percent: int
    modes: list[Literal["input", "output"]]
    lines_written: int
    lines_dropped: int
    dropped_by_reason: dict[str, int] = Field(description="queue_full, write_failed")


class ComponentOverview(Open):
    name: str
    copies: int
    ready: int
    capture: CaptureInfo | None = Field(
        None, description="Its data capture (null: off; absent on a component with variants: see theirs)"
    )


class MetricInfo(Open):
    """One series: its CloudWatch name, unit, the statistic a window gives, what it means."""

    name: str
    unit: str
    stat: str
    help: str


class ConsoleInfo(Open):
    period_s: float
    retention_s: float
    reports: bool = Field(description="A reports folder is open (--reports DIR)")
    metrics: list[MetricInfo]


class ConsoleOverview(Open):
    """The server or endpoint, its host, its components and the console's own settings."""

    kind: Literal["server", "endpoint"]
    name: str
    version: str
    backend: str
    uptime_s: float
    auth: bool
    host: HostInfo
    admin: AdminInfo
    components: list[ComponentOverview]
    on_demand: dict[str, Any] | None
    console: ConsoleInfo


class ComponentSeries(Open):
    """One component's points: their end times and periods, and one list per series (null: nothing to
    say, e.g. no request timed in that period)."""

    t: list[float]
    period_s: list[float]
    series: dict[str, list[float | None]]
    refusals: list[dict[str, float]]


class ConsoleSeries(Open):
    now: float
    period_s: float
    components: dict[str, ComponentSeries]


class ComponentWindow(Open):
    figures: dict[str, float | None]
    refusals: dict[str, float]


class ConsoleMetrics(Open):
    """Each component's figures over the last `window_s` seconds, and the unit of each figure."""

    window_s: float
    now: float
    units: dict[str, str]
    components: dict[str, ComponentWindow]


class ReportInfo(Open):
    name: str
    kind: Literal["bench", "tune"]
    modified: float
    report: str | None = Field(description="Its report.html, if it has one")
    files: list[str]


class ConsoleReports(Open):
    """The bench and tune results in the reports folder, newest first (`dir`: null without --reports)."""

    dir: str | None
    reports: list[ReportInfo]


class ReportJSON(RootModel[Any]):
    """A report's JSON file, as it is."""


class Ticket(Open):
    """Where the report opens once (within a minute), without the key."""

    url: str
