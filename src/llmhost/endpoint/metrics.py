"""`/metrics` of the endpoint: the router's own gauges and counters, then every copy's metrics
relabelled with `component` and `copy`, one HELP/TYPE header per family."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import httpx

from llmhost.endpoint.replica import ReplicaState

if TYPE_CHECKING:
    from llmhost.endpoint.component import Component

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(.*)$")


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())


def relabel(text: str, labels: str, families: dict[str, list[str]], samples: dict[str, list[str]]) -> None:
    """Add `labels` to every sample of one copy's exposition, grouped under its family."""
    family = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                family = parts[2]
                header = families.setdefault(family, [])
                if not any(h.split(None, 2)[1] == parts[1] for h in header):
                    header.append(line)
                samples.setdefault(family, [])
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, existing, value = m.group(1), m.group(2), m.group(3)
        inner = labels + ("," + existing[1:-1] if existing and existing[1:-1] else "")
        key = family if family and name.startswith(family) else name
        samples.setdefault(key, []).append(f"{name}{{{inner}}} {value}")


def router_metrics(components: Sequence[Component]) -> str:
    lines = [
        "# HELP llmhost_endpoint_copies Copies of each component by state",
        "# TYPE llmhost_endpoint_copies gauge",
    ]
    for c in components:
        for state in ReplicaState:
            n = sum(1 for r in c.replicas if r.state == state)
            lines.append(f"llmhost_endpoint_copies{{{_labels(component=c.name, state=state.value)}}} {n}")
    lines += ["# HELP llmhost_endpoint_in_flight Requests at the router, waiting ones included",
              "# TYPE llmhost_endpoint_in_flight gauge"]  # fmt: skip
    lines += [f"llmhost_endpoint_in_flight{{{_labels(component=c.name)}}} {c.in_flight}" for c in components]
    lines += ["# HELP llmhost_endpoint_waiting Requests waiting for a ready copy",
              "# TYPE llmhost_endpoint_waiting gauge"]  # fmt: skip
    lines += [f"llmhost_endpoint_waiting{{{_labels(component=c.name)}}} {c.waiting}" for c in components]
    lines += ["# HELP llmhost_endpoint_copy_outstanding Requests in flight on each copy",
              "# TYPE llmhost_endpoint_copy_outstanding gauge"]  # fmt: skip
    for c in components:
        for r in c.replicas:
            lines.append(f"llmhost_endpoint_copy_outstanding{{{_labels(component=c.name, copy=r.id)}}} "
                         f"{r.outstanding}")  # fmt: skip
    lines += ["# HELP llmhost_endpoint_requests_total Requests answered by the router, by status",
              "# TYPE llmhost_endpoint_requests_total counter"]  # fmt: skip
    for c in components:
        for code, n in sorted(c.requests.items()):
            lines.append(
                f"llmhost_endpoint_requests_total{{{_labels(component=c.name, code=str(code))}}} {n}"
            )
    for name, help_, attr in (
        ("llmhost_endpoint_retries_total", "Requests re-sent to another copy", "retries"),
        ("llmhost_endpoint_stream_errors_total", "Streams cut by a failing copy", "stream_errors"),
    ):
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter"]
        lines += [f"{name}{{{_labels(component=c.name)}}} {getattr(c, attr)}" for c in components]
    lines += ["# HELP llmhost_endpoint_copy_restarts_total Restarts of each copy",
              "# TYPE llmhost_endpoint_copy_restarts_total counter"]  # fmt: skip
    for c in components:
        for r in c.replicas:
            lines.append(f"llmhost_endpoint_copy_restarts_total{{{_labels(component=c.name, copy=r.id)}}} "
                         f"{r.restarts}")  # fmt: skip
    return "\n".join(lines) + "\n"


async def _scrape(client: httpx.AsyncClient, url: str) -> str:
    try:
        resp = await client.get(f"{url}/metrics", timeout=5.0)
        return resp.text if resp.status_code == 200 else ""
    except httpx.HTTPError:
        return ""


async def render_metrics(components: Sequence[Component], client: httpx.AsyncClient) -> str:
    targets = [
        (c.name, r) for c in components for r in c.replicas
        if r.state in (ReplicaState.READY, ReplicaState.DRAINING)
    ]  # fmt: skip
    texts = await asyncio.gather(*(_scrape(client, r.url) for _, r in targets))
    families: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for (name, r), text in zip(targets, texts, strict=True):
        relabel(text, _labels(component=name, copy=r.id), families, samples)
    out = [router_metrics(components)]
    for family in samples:
        out.extend(line + "\n" for line in families.get(family, []))
        out.extend(line + "\n" for line in samples[family])
    return "".join(out)
