"""The jobs' Prometheus families: batches by status, and their requests queued, running and answered;
SageMaker async invocations by status.
Nothing before the jobs folder is opened: a server that never ran a batch shows none (and an endpoint's
copies add nothing to the router's)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmhost.jobs.service import Jobs

FAMILY = "llmhost_batch"
ASYNC_FAMILY = "llmhost_async_invocations"
# the names of every family here: the endpoint's router shows its own, not its copies'
FAMILIES = (FAMILY, ASYNC_FAMILY)


def jobs_families(jobs: Jobs) -> list[Metric]:
    figures = jobs.figures()
    if figures is None:
        return []
    batches = GaugeMetricFamily(f"{FAMILY}es", "Batches in the jobs folder, by status", labels=["status"])
    for status, n in figures.batches.items():
        batches.add_metric([status.value], n)
    queued = GaugeMetricFamily(f"{FAMILY}_requests_queued", "Batch requests not yet sent, in open batches")
    queued.add_metric([], figures.queued)
    running = GaugeMetricFamily(f"{FAMILY}_requests_running", "Batch requests being answered now")
    running.add_metric([], figures.running)
    answered = CounterMetricFamily(
        f"{FAMILY}_requests",
        "Batch requests answered, by outcome (a refusal goes to the error file)",
        labels=["outcome"],
    )
    answered.add_metric(["completed"], figures.completed)
    answered.add_metric(["failed"], figures.failed)
    invocations = GaugeMetricFamily(
        ASYNC_FAMILY,
        "SageMaker async invocations in the jobs folder, by status (queued, running, answered, "
        "completed, failed)",
        labels=["status"],
    )
    for state, n in figures.async_invocations.items():
        invocations.add_metric([state.value], n)
    return [batches, queued, running, answered, invocations]


class JobsCollector(Collector):
    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs

    def collect(self) -> Iterable[Metric]:
        return jobs_families(self.jobs)
