"""Traces of requests, as the replica and the endpoint's router share them: the request a span is about
(`RequestTrace`, found through a context variable by whoever makes the request worth a span), the ASGI
middleware that opens and closes it, and the tracer, opened only when an OTLP endpoint is set.

Nothing here imports OpenTelemetry: with no endpoint configured no tracer exists, the middleware is not
installed and `current()` answers None, so tracing costs a request nothing (llmhost.web.otel holds the
SDK, imported by `open_tracer` alone)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmhost.errors import LlmhostError
from llmhost.web.asgi import request_id

# what a span attribute may hold (OpenTelemetry's AttributeValue, without importing it)
AttrValue = str | bool | int | float | Sequence[str]
# the variables an endpoint hands its copies, where they run in processes of its own (Ray's): the OTLP
# exporter's and the batch processor's settings are all OTEL_*
ENV_PREFIX = "OTEL_"
# W3C trace context: what a span's context is propagated in
PROPAGATED = ("traceparent", "tracestate")


class Span(Protocol):
    def headers(self) -> dict[str, str]:
        """This span's context as the W3C headers a request it causes carries (its child's parent)."""

    def end(self, name: str, attributes: Mapping[str, AttrValue], failed: bool, end_ns: int) -> None:
        """Named, its attributes set, marked failed or not, ended at `end_ns` (time.time_ns), queued for
        export."""


class Tracer(Protocol):
    def start(self, parent: Mapping[str, str], start_ns: int) -> Span:
        """A span begun at `start_ns` (time.time_ns) as the child of the W3C context in `parent` (a
        request's headers; none: the root of a new trace)."""

    def shutdown(self) -> None:
        """Export what is queued, then stop."""


class SpanDetail(Protocol):
    """What a request that is worth a span says of itself, read once as the request ends."""

    def name(self) -> str | None:
        """The span's name; None: the request turned out to be none worth a span."""

    def attributes(self) -> Mapping[str, AttrValue]: ...


class RequestTrace:
    """One HTTP request as its span will tell it: it gets one only once something claims it (`detail`
    set: an inference request in a replica, a routed one in the router), begun when it arrived."""

    def __init__(self, tracer: Tracer, headers: Mapping[str, str], start_ns: int) -> None:
        self.tracer = tracer
        self.parent = headers
        self.start_ns = start_ns
        self.detail: SpanDetail | None = None
        self._span: Span | None = None

    def span(self) -> Span:
        """Its span, begun at the request's arrival on first use."""
        if self._span is None:
            self._span = self.tracer.start(self.parent, self.start_ns)
        return self._span

    def propagated(self) -> dict[str, str]:
        """The headers that make this request's span the parent of a request it sends on."""
        return self.span().headers()

    def end(self, attributes: Mapping[str, AttrValue], status: int, end_ns: int) -> None:
        """Its span ended at `end_ns` with `attributes` (the HTTP ones) and the detail's, if it has a
        detail."""
        name = self.detail.name() if self.detail is not None else None
        if self.detail is not None and name is not None:
            attrs = {**attributes, **self.detail.attributes()}
            self.span().end(name, attrs, failed=status >= 500, end_ns=end_ns)


_CURRENT: ContextVar[RequestTrace | None] = ContextVar("llmhost_request_trace", default=None)


def current() -> RequestTrace | None:
    """The request being served here, where tracing is on (None: off, or outside a request)."""
    return _CURRENT.get()


class TraceMiddleware:
    """Gives each HTTP request its RequestTrace (found by `current()` in the routes and whatever they
    await), and ends its span once the response is sent, with its status: the end is the moment the
    last body message is handed on (streams included), not when the app returns after it, so that a
    copy's span ends before its caller (the endpoint's router) can have read the last byte and ended
    its own: a child's span lies within its parent's by causality, not by scheduling."""

    def __init__(self, app: ASGIApp, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers", [])
            if k.decode("latin-1") in PROPAGATED
        }
        trace = RequestTrace(self.tracer, headers, time.time_ns())
        token = _CURRENT.set(trace)
        status = 500  # an app that raised before answering: RequestContextMiddleware answers 500
        end_ns: int | None = None  # None: no last body message sent (the app raised or was cut)

        async def send_status(message: Message) -> None:
            nonlocal status, end_ns
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                end_ns = time.time_ns()
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            _CURRENT.reset(token)
            trace.end(_http_attributes(scope, status), status, end_ns or time.time_ns())


def _http_attributes(scope: Scope, status: int) -> dict[str, AttrValue]:
    """The OpenTelemetry HTTP server attributes of a request, and llmhost's request id (its logs')."""
    attrs: dict[str, AttrValue] = {
        "http.request.method": str(scope.get("method", "")),
        "url.path": str(scope.get("path", "")),
        "http.response.status_code": status,
        "llmhost.request_id": request_id(scope),
    }
    if status >= 500:
        attrs["error.type"] = str(status)
    return attrs


class TracingUnavailableError(LlmhostError):
    """An OTLP endpoint is set where OpenTelemetry's SDK is not installed (the `otel` extra)."""


def open_tracer(endpoint: str, service: str) -> Tracer | None:
    """A tracer exporting to `endpoint` (OTLP over HTTP, batched on a thread of its own) as `service`
    unless $OTEL_SERVICE_NAME names it; none for no endpoint (OpenTelemetry is not even imported)."""
    if not endpoint:
        return None
    try:
        from llmhost.web.otel import OtlpTracer
    except ImportError as exc:
        raise TracingUnavailableError(
            f"--otlp-traces-endpoint {endpoint}: OpenTelemetry's SDK is not installed "
            f"(pip install 'llmhost[otel]'): {exc}"
        ) from exc
    return OtlpTracer(endpoint, service)


def adopt_env(env: Mapping[str, str]) -> None:
    """The OTEL_* variables an endpoint passed to a process of its own (a Ray copy, its ingress): set
    here, where the OpenTelemetry SDK reads them (the service name, the batch processor's delay)."""
    os.environ.update({k: v for k, v in env.items() if k.startswith(ENV_PREFIX)})


def otel_env() -> dict[str, str]:
    """This process's OTEL_* variables, for processes it starts where they are not inherited."""
    return {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
