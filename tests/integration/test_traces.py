"""Traces: a real server (and a real endpoint) sending its spans as OTLP over HTTP to a real receiver on
127.0.0.1: one span per inference request, whatever its API, in the GenAI conventions' terms, the caller's
trace continued; behind `endpoint up` the router's span is the copy's parent."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server
from tests.integration.endpoint_helpers import ENGINE, start_endpoint, stop_endpoint
from tests.otlpreceiver import Receiver, Span, otlp_receiver

# the batch processor's delay (the SDK's variable, in ms): spans arrive within a tenth of a second
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as r:
        yield r


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("traced"),
        "--chat-template",
        str(CHAT_TEMPLATE),
        "--served-model-name",
        "gemma-test",
        "--max-input-tokens",
        "256",
        "--max-total-tokens",
        "512",
        "--otlp-traces-endpoint",
        receiver.url,
        env=FAST_EXPORT,
    )
    yield srv
    stop_server(srv)


def traceparent() -> tuple[str, str, str]:
    """A caller's W3C traceparent: (header, trace id, span id)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def spans_of(receiver: Receiver, rid: str, count: int = 1) -> list[Span]:
    """The spans of the request with id `rid`, once `count` of them arrived."""

    def mine(spans: list[Span]) -> list[Span]:
        return [s for s in spans if s.attributes.get("llmhost.request_id") == rid]

    return mine(receiver.wait_for(f"span of {rid}", lambda spans: len(mine(spans)) >= count))


def test_a_chat_request_is_one_span_in_the_callers_trace(traced: Server, receiver: Receiver) -> None:
    header, trace_id, parent_id = traceparent()
    rid = uuid.uuid4().hex
    client = OpenAI(base_url=f"{traced.url}/v1", api_key="none", max_retries=0)
    reply = client.chat.completions.create(
        model="gemma-test",
        messages=[{"role": "user", "content": "Say hi"}],
        max_tokens=5,
        temperature=0,
        extra_headers={"traceparent": header, "x-request-id": rid},
    )
    assert reply.usage is not None
    [span] = spans_of(receiver, rid)
    assert (span.trace_id, span.parent_span_id, span.server) == (trace_id, parent_id, True)
    assert span.name == "chat gemma-test" and span.service == "llmhost"
    a = span.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "gemma-test"
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.temperature"]) == (5, 0.0)
    assert a["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens
    assert a["gen_ai.response.finish_reasons"] == [reply.choices[0].finish_reason]
    assert a["llmhost.usage.cached_tokens"] == 0
    assert 0 <= a["llmhost.queue_time_s"] <= a["llmhost.time_to_first_token_s"]
    assert a["llmhost.time_to_first_token_s"] * 1e9 <= span.end_ns - span.start_ns
    assert (a["http.request.method"], a["url.path"], a["http.response.status_code"]) == (
        "POST",
        "/v1/chat/completions",
        200,
    )


def test_every_api_is_traced_once_and_other_routes_not(traced: Server, receiver: Receiver) -> None:
    """A streamed completion (its span ends with the stream), TGI's (no `model`: the served one),
    Ollama's chat, embeddings; /ping and /v1/models are no inference."""
    ids = {name: uuid.uuid4().hex for name in ("stream", "tgi", "ollama", "embed", "ping", "models")}
    with traced.client() as c:

        def post(name: str, path: str, body: dict[str, object]) -> httpx.Response:
            r = c.post(path, json=body, headers={"x-request-id": ids[name]})
            assert r.status_code == 200, r.text
            return r

        streamed = post("stream", "/v1/completions", {"prompt": "Hello", "max_tokens": 3, "stream": True})
        assert "[DONE]" in streamed.text
        post("tgi", "/generate", {"inputs": "Hello", "parameters": {"max_new_tokens": 2}})
        chat = {"model": "gemma-test", "messages": [{"role": "user", "content": "Hi"}], "stream": False}
        post("ollama", "/api/chat", chat | {"options": {"num_predict": 2}})
        embedded = post("embed", "/v1/embeddings", {"input": "a few words"}).json()
        assert c.get("/ping", headers={"x-request-id": ids["ping"]}).status_code == 200
        assert c.get("/v1/models", headers={"x-request-id": ids["models"]}).status_code == 200
    [stream] = spans_of(receiver, ids["stream"])
    assert stream.name == "text_completion gemma-test"
    assert stream.attributes["gen_ai.usage.output_tokens"] == 3
    assert stream.attributes["gen_ai.response.finish_reasons"] == ["length"]
    [tgi] = spans_of(receiver, ids["tgi"])
    assert tgi.attributes["gen_ai.operation.name"] == "text_completion"
    assert tgi.attributes["gen_ai.request.model"] == "gemma-test"
    [ollama] = spans_of(receiver, ids["ollama"])
    assert ollama.attributes["gen_ai.operation.name"] == "chat"
    assert ollama.attributes["gen_ai.request.max_tokens"] == 2
    [embed] = spans_of(receiver, ids["embed"])
    assert embed.attributes["gen_ai.operation.name"] == "embeddings"
    assert embed.attributes["gen_ai.usage.input_tokens"] == embedded["usage"]["prompt_tokens"]
    # a new trace each, as no traceparent came
    assert len({s.trace_id for s in (stream, tgi, ollama, embed)}) == 4 and not stream.parent_span_id
    # every span of the batch was exported by now (the embeddings' was last): none for the others
    assert {s.attributes.get("llmhost.request_id") for s in receiver.spans()}.isdisjoint(
        {ids["ping"], ids["models"]}
    )


ENDPOINT = f"""
name: traced
components:
  - name: a
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
"""


def test_an_endpoint_traces_router_then_copy(tmp_path: Path, receiver: Receiver) -> None:
    """`endpoint up --otlp-traces-endpoint`: the router's span, child of the caller's, is the parent of
    the copy's (the copy inherits the setting)."""
    ep = start_endpoint(tmp_path, ENDPOINT, args=("--otlp-traces-endpoint", receiver.url), env=FAST_EXPORT)
    try:
        header, trace_id, parent_id = traceparent()
        rid = uuid.uuid4().hex
        body = {"model": "a", "prompt": "Hello", "max_tokens": 2}
        r = httpx.post(
            f"{ep.url}/v1/completions",
            json=body,
            headers={"traceparent": header, "x-request-id": rid},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        spans = {s.service: s for s in spans_of(receiver, rid, count=2)}
    finally:
        stop_endpoint(ep)
    router, copy = spans["llmhost-endpoint"], spans["llmhost"]
    assert router.trace_id == copy.trace_id == trace_id
    assert router.parent_span_id == parent_id and copy.parent_span_id == router.span_id
    assert router.name == "POST /v1/completions"
    assert router.attributes["llmhost.component"] == "a"
    assert router.attributes["llmhost.copy"] == "a-0"
    assert copy.name == "text_completion a" and copy.attributes["gen_ai.usage.output_tokens"] == 2
    assert router.start_ns <= copy.start_ns and copy.end_ns <= router.end_ns
