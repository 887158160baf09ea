"""Traces' pure parts: tracing off costs no import of OpenTelemetry's SDK nor its exporter (its API
comes with FastAPI, whose own telemetry stays off without a global provider); a request's choices are
counted as its usage is (the prompt once)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from llmhost.engine.request import FinishReason, GenerationEvent, GenerationRequest, SamplingParams, Timings
from llmhost.server.tracing import InferenceSpan
from llmhost.web.traces import AttrValue, TraceMiddleware, TracingUnavailableError, current, open_tracer

# a server's and an endpoint router's apps built, with or without an OTLP endpoint: how many modules of
# OpenTelemetry's SDK and exporters are loaded then
PROBE = """
import sys
from pathlib import Path
from llmhost.engine.config import EngineConfig
from llmhost.server import ServerSettings, create_app
import llmhost.endpoint.app, llmhost.endpoint.launch
settings = ServerSettings(model_path=Path("none.gguf"), engine=EngineConfig(), jobs_dir=sys.argv[1],
                          otlp_traces_endpoint=sys.argv[2])
create_app(settings)
print(sum(m.startswith(("opentelemetry.sdk", "opentelemetry.exporter")) for m in sys.modules))
"""


def otel_modules_loaded(tmp: Path, endpoint: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp), endpoint], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_without_an_endpoint_the_sdk_is_not_imported(tmp_path: Path) -> None:
    assert otel_modules_loaded(tmp_path, "") == 0
    assert otel_modules_loaded(tmp_path, "http://127.0.0.1:9/v1/traces") > 0


def _end(
    rid: str, prompt: int, completion: int, cached: int, queue_ms: float, ttft_ms: float
) -> GenerationEvent:
    t = Timings(queue_ms=queue_ms, cache_n=cached, predicted_n=completion, ttft_ms=ttft_ms)
    return GenerationEvent(rid, [], "", [], FinishReason.EOS, t, prompt, completion)


def test_choices_share_their_prompt_and_the_first_token_is_the_earliest() -> None:
    span = InferenceSpan("served")
    params = SamplingParams(max_tokens=7, temperature=0.5)
    for i in range(2):
        span.submitted(GenerationRequest(f"r/{i}", [1, 2, 3], params, group="r/0"))
    span.finished(_end("r/0", 3, 4, 1, 10.0, 30.0))
    span.finished(_end("r/1", 3, 5, 1, 12.0, 20.0))
    a = span.attributes()
    assert span.name() == "text_completion served"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (3, 9)
    assert a["llmhost.usage.cached_tokens"] == 1
    assert (a["llmhost.queue_time_s"], a["llmhost.time_to_first_token_s"]) == (0.01, 0.02)
    assert a["gen_ai.response.finish_reasons"] == ("stop", "stop")
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.temperature"]) == (7, 0.5)


def test_a_request_that_asked_no_inference_gets_no_span() -> None:
    span = InferenceSpan("served")
    span.model = "named"  # /api/show names a model: no inference
    assert span.name() is None


def test_an_endpoint_without_the_sdk_installed_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llmhost.web.otel", None)  # as if OpenTelemetry's SDK were absent
    with pytest.raises(TracingUnavailableError, match=r"pip install 'llmhost\[otel\]'"):
        open_tracer("http://127.0.0.1:9/v1/traces", "llmhost")
    assert open_tracer("", "llmhost") is None


class Recorded:
    """A span that keeps what it was ended with."""

    def __init__(self) -> None:
        self.end_ns: int | None = None

    def headers(self) -> dict[str, str]:
        return {}

    def end(self, name: str, attributes: Mapping[str, AttrValue], failed: bool, end_ns: int) -> None:
        self.end_ns = end_ns


class Recorder:
    def __init__(self) -> None:
        self.spans: list[Recorded] = []

    def start(self, parent: Mapping[str, str], start_ns: int) -> Recorded:
        self.spans.append(Recorded())
        return self.spans[-1]

    def shutdown(self) -> None:
        pass


class Named:
    def name(self) -> str | None:
        return "text_completion m"

    def attributes(self) -> Mapping[str, AttrValue]:
        return {}


def test_a_span_ends_as_its_last_byte_is_sent_not_when_the_app_returns() -> None:
    """The endpoint's router ends its span once it has read the copy's last byte: the copy's span must
    end before that byte leaves, or the child's span would outlast its parent's."""
    sent_at: list[int] = []

    async def app(scope: object, receive: object, send: object) -> None:
        trace = current()
        assert trace is not None
        trace.detail = Named()
        await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"a", "more_body": True})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"b"})  # type: ignore[operator]
        await asyncio.sleep(0.05)  # what the app does after its answer left is not the request's

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            sent_at.append(time.time_ns())

    async def receive() -> dict[str, object]:
        return {"type": "http.disconnect"}

    tracer = Recorder()
    scope = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": []}
    asyncio.run(TraceMiddleware(app, tracer)(scope, receive, send))  # type: ignore[arg-type]
    [span] = tracer.spans
    assert span.end_ns is not None and span.end_ns <= sent_at[0]
