"""The OpenTelemetry SDK behind `llmhost.web.traces.Tracer`: spans exported as OTLP over HTTP by a
batch processor on a thread of its own (a request only queues its span), a tracer provider of llmhost's
own (never the process's global one, which a host application or Ray may have set), the W3C trace
context read from and written to headers. Imported only where an OTLP endpoint is set (the `otel`
extra)."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from llmhost import __version__

_PROPAGATOR = TraceContextTextMapPropagator()


class OtlpSpan:
    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def headers(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, trace.set_span_in_context(self._span))
        return carrier

    def end(self, name: str, attributes: Mapping[str, AttributeValue], failed: bool, end_ns: int) -> None:
        span = self._span
        span.update_name(name)
        span.set_attributes(attributes)
        if failed:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=end_ns)


class OtlpTracer:
    """Spans of this process, exported to `endpoint` (the full URL, `.../v1/traces`) as `service` unless
    $OTEL_SERVICE_NAME (or $OTEL_RESOURCE_ATTRIBUTES) names it; the batch processor's schedule and
    limits are the SDK's, from $OTEL_BSP_*."""

    def __init__(self, endpoint: str, service: str) -> None:
        # the variables' resource over llmhost's default name: a name given there wins
        resource = Resource.create({SERVICE_NAME: service}).merge(OTELResourceDetector().detect())
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self._tracer = self._provider.get_tracer("llmhost", __version__)

    def start(self, parent: Mapping[str, str], start_ns: int) -> OtlpSpan:
        context = _PROPAGATOR.extract(parent)
        span = self._tracer.start_span("request", context, kind=SpanKind.SERVER, start_time=start_ns)
        return OtlpSpan(span)

    def shutdown(self) -> None:
        self._provider.shutdown()
