"""A component's counters at the endpoint's front, the same under both back ends: the single-host router
and the Ray ingress count each request they take for a component here, and the console and /metrics
read them from here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from llmhost.console.readings import FrontReading


class FrontCounters:
    """Requests a component was asked, as the front (router or ingress) answered them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.in_flight = 0  # requests at the front for this component, waiting ones included
        self.waiting = 0  # requests no copy has taken yet
        self.requests: Counter[int] = Counter()  # by HTTP status the front answered
        self.retries = 0  # requests sent again because no copy had taken them
        self.stream_errors = 0  # streams cut by a failing copy
        self.no_capacity = 0  # requests refused because no copy took them within the wait
        # answers timed (the console's ModelLatency and OverheadLatency): arrival to last byte, and from
        # the call a copy took until its last byte
        self.timed = 0
        self.latency_s = 0.0
        self.model_latency_s = 0.0

    def enter(self) -> None:
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1

    def timed_answer(self, total_s: float, model_s: float) -> None:
        self.timed += 1
        self.latency_s += total_s
        self.model_latency_s += model_s

    def reading(self) -> FrontReading:
        """The counters as the console's sampler reads them each period."""
        return FrontReading(
            responses=dict(self.requests),
            no_capacity=self.no_capacity,
            timed=self.timed,
            latency_s=self.latency_s,
            model_latency_s=self.model_latency_s,
            in_flight=self.in_flight,
            waiting=self.waiting,
        )


def front_families(components: Sequence[FrontCounters]) -> list[Metric]:
    """The counters in /metrics, labelled by component."""
    in_flight = GaugeMetricFamily(
        "llmhost_endpoint_in_flight",
        "Requests at the router (or the Ray ingress), waiting ones included",
        labels=["component"],
    )
    waiting = GaugeMetricFamily(
        "llmhost_endpoint_waiting", "Requests waiting for a copy to take them", labels=["component"]
    )
    answered = CounterMetricFamily(
        "llmhost_endpoint_requests",
        "Requests answered by the router (or the Ray ingress), by status",
        labels=["component", "code"],
    )
    retries = CounterMetricFamily(
        "llmhost_endpoint_retries",
        "Requests sent again to another copy because they never reached the first",
        labels=["component"],
    )
    cut = CounterMetricFamily(
        "llmhost_endpoint_stream_errors", "Streams cut by a failing copy", labels=["component"]
    )
    for c in components:
        in_flight.add_metric([c.name], c.in_flight)
        waiting.add_metric([c.name], c.waiting)
        for code, n in sorted(c.requests.items()):
            answered.add_metric([c.name, str(code)], n)
        retries.add_metric([c.name], c.retries)
        cut.add_metric([c.name], c.stream_errors)
    return [in_flight, waiting, answered, retries, cut]
