"""A lone server's front door for the console: answers by status and their latency, counted by a thin
ASGI middleware (a dict increment and two clock reads a request), and the console's last figures as
Prometheus families for `/metrics`."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmhost.console.readings import FrontReading
from llmhost.console.timeseries import METRICS, SeriesStore

# requests that are not invocations: the console's own, probes and scrapes
NOT_INVOCATIONS = frozenset({"/ping", "/health", "/metrics"})
CONSOLE_PREFIX = "/console"
# the console's families in /metrics
FAMILY = "llmhost_console"


def is_invocation(path: str) -> bool:
    console = path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")
    return path not in NOT_INVOCATIONS and not console


class FrontTally:
    """Cumulative counts the sampler reads; only the event loop writes them."""

    def __init__(self) -> None:
        self.responses: Counter[int] = Counter()
        self.timed = 0
        self.latency_s = 0.0
        self.in_flight = 0

    def reading(self) -> FrontReading:
        # a lone server is the model: all of its time is the model's, none is overhead
        return FrontReading(
            responses=dict(self.responses),
            timed=self.timed,
            latency_s=self.latency_s,
            model_latency_s=self.latency_s,
            in_flight=self.in_flight,
        )


class FrontCounter:
    """Counts every invocation's status once its answer's last byte is sent (or it failed)."""

    def __init__(self, app: ASGIApp, tally: FrontTally) -> None:
        self.app = app
        self.tally = tally

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_invocation(scope["path"]):
            await self.app(scope, receive, send)
            return
        tally = self.tally
        started = time.monotonic()
        status = 500  # an exception before any answer: the outer middleware answers 500
        done = False

        async def counting_send(message: Message) -> None:
            nonlocal status, done
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                done = True

        tally.in_flight += 1
        try:
            await self.app(scope, receive, counting_send)
        finally:
            tally.in_flight -= 1
            tally.responses[status] += 1
            if done:
                tally.timed += 1
                tally.latency_s += time.monotonic() - started


class ConsoleCollector(Collector):
    """The console's figures in a prometheus_client registry (a lone server's /metrics)."""

    def __init__(self, store: SeriesStore) -> None:
        self.store = store

    def collect(self) -> Iterable[Metric]:
        return console_families(self.store)


def console_families(store: SeriesStore) -> Iterable[Metric]:
    """The last period's figures, one gauge per CloudWatch-named series, by component."""
    latest = store.latest()
    family = GaugeMetricFamily(
        FAMILY,
        "The console's figures of the last sampling period, named as CloudWatch names "
        "them (Invocations, ModelLatency, ...; unit in the label)",
        labels=["component", "name", "unit"],
    )
    for component, figures in sorted(latest.items()):
        for m in METRICS:
            value = figures[m.name]
            if value is not None:
                family.add_metric([component, m.name, m.unit], value)
    period = GaugeMetricFamily(
        f"{FAMILY}_period_seconds", "Seconds one console point covers", value=store.period_s
    )
    return [family, period]
