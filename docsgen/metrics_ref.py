"""The `/metrics` families of `llmhost serve` and of an endpoint's router, from the registries they
define (prometheus_client objects: names, types, help and label names)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI
from prometheus_client.metrics import MetricWrapperBase

from docsgen.md import table
from llmhost.endpoint.metrics import router_families
from llmhost.engine.stats import EngineStats
from llmhost.jobs.metrics import jobs_families
from llmhost.jobs.service import Jobs
from llmhost.jobs.settings import JobsSettings
from llmhost.server.metrics import ServerMetrics
from llmhost.web.capture.metrics import CaptureCollector
from llmhost.web.capture.sinks import FileSink
from llmhost.web.capture.writer import CaptureWriter
from llmhost.web.quota import KeyUsage

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def _labels(metric: object) -> tuple[str, ...]:
    # prometheus_client keeps label names on the objects it describes, in this attribute
    return tuple(getattr(metric, "_labelnames", ()))


def server_families() -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """(name, type, help, labels) of `llmhost serve`'s /metrics."""
    metrics = ServerMetrics()
    declared = {m._name: m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)}
    metrics.attach(lambda: EngineStats(0, 0, 0, 1, 0, 0, 0, 0, 0))
    for family in metrics.registry.collect():
        yield family.name, family.type, family.documentation, _labels(declared.get(family.name))


def router_families_() -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    for family in router_families([]):
        yield family.name, family.type, family.documentation, _labels(family)


def jobs_families_() -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """The batch jobs' and async invocations' families (of a jobs folder in use: a new one, here)."""
    with tempfile.TemporaryDirectory() as root:
        jobs = Jobs(JobsSettings(Path(root)), FastAPI())
        jobs.store()
        families = jobs_families(jobs)
        jobs.store().close()
    for family in families:
        yield family.name, family.type, family.documentation, _labels(family)


def capture_families() -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """Data capture's families (a server with --capture-dir)."""
    writer = CaptureWriter(FileSink(Path("unused"), "endpoint", "variant"), max_bytes=1)
    for family in CaptureCollector(writer).collect():
        labels = tuple(sorted({k for sample in family.samples for k in sample.labels}))
        yield family.name, family.type, family.documentation, labels


def key_families_() -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """Each named API key's usage (web/quota.py)."""
    for family in KeyUsage().families():
        yield family.name, family.type, family.documentation, _labels(family)


def series(name: str, kind: str) -> list[str]:
    return [name + s for s in SUFFIXES.get(kind, ("",))]


def names() -> set[str]:
    every = (server_families(), router_families_(), jobs_families_(), capture_families(), key_families_())
    return {s for fam in every for n, k, *_ in fam for s in series(n, k)}


def _table(families: Iterator[tuple[str, str, str, tuple[str, ...]]]) -> str:
    rows = [
        [", ".join(f"`{s}`" for s in series(n, k)), k, ", ".join(f"`{lab}`" for lab in labels), h]
        for n, k, h, labels in families
    ]
    return table(["series", "type", "labels", "meaning"], rows)


def render() -> str:
    return "\n".join(
        [
            "### `llmhost serve`",
            "",
            _table(server_families()),
            "",
            "### An endpoint's router (`llmhost endpoint up`)",
            "",
            "The router's own families, then every copy's families above with the labels `component` and "
            "`copy` added first:",
            "",
            _table(router_families_()),
            "",
            "### Batch jobs and async invocations (a server, an endpoint's router, the Ray ingress)",
            "",
            "Shown once the jobs folder is in use (a file uploaded, a batch or an async invocation made, or "
            "one left to resume at start); a copy's are not relayed by the router:",
            "",
            _table(jobs_families_()),
            "",
            "### Data capture (`llmhost serve --capture-dir`)",
            "",
            "Shown by a server that captures ([data capture](../guides/operations.md#data-capture)):",
            "",
            _table(capture_families()),
            "",
            "### Per API key (a server, an endpoint's router)",
            "",
            "A sample per key name of `--api-key-file`'s YAML form (keys without a name are not counted "
            "apart; an endpoint's router counts requests and refusals, not tokens): see "
            "[Quotas per API key](../guides/operations.md#quotas-per-api-key).",
            "",
            _table(key_families_()),
            "",
        ]
    )
