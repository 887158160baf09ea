"""The SageMaker Runtime wire rules: content negotiation, and errors as botocore's parser reads them."""

from __future__ import annotations

import json

import pytest
from starlette.responses import JSONResponse

from llmhost.server.serving.apis.runtime import sse_error, streaming_body, streams
from llmhost.web import eventstream
from llmhost.web import sagemaker_runtime as wire
from tests.unit.boto_runtime import STREAM, parse


def boto(response: JSONResponse, operation: str = "InvokeEndpoint") -> dict[str, object]:
    return parse(response.status_code, dict(response.headers), bytes(response.body), operation)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (None, True),
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("text/csv", False),
        ("application/jsonlines", False),
        ("", False),
    ],
)
def test_only_json_bodies_are_read(value: str | None, ok: bool) -> None:
    problem = wire.content_type_problem(value)
    assert (problem is None) == ok
    if problem is not None:
        assert "ContentType" in problem


@pytest.mark.parametrize(
    ("accept", "produced", "ok"),
    [
        (None, wire.JSON, True),
        ("", wire.JSON, True),
        ("*/*", wire.JSON, True),
        ("application/*", wire.JSON, True),
        ("text/csv, application/json;q=0.5", wire.JSON, True),
        ("application/json; q=0", wire.JSON, False),
        ("text/csv", wire.JSON, False),
        ("application/json", wire.SSE, False),
        ("text/event-stream", wire.SSE, True),
    ],
)
def test_accept_must_admit_what_the_call_answers(accept: str | None, produced: str, ok: bool) -> None:
    assert wire.accepts(accept, produced) == ok
    problem = wire.accept_problem(accept, produced)
    assert (problem is None) == ok and (ok or "Accept" in str(problem))


def test_validation_error_is_botocores_validation_error() -> None:
    message = "ContentType 'text/csv' is not supported"
    parsed = boto(wire.validation_error(message, "rid-1"))
    assert parsed["Error"] == {"Code": "ValidationError", "Message": message}
    assert parsed["ResponseMetadata"]["RequestId"] == "rid-1"
    assert parsed["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_service_unavailable_says_when_to_retry() -> None:
    response = wire.service_unavailable("queue full", "r", "3")
    assert response.headers["retry-after"] == "3" and response.status_code == 503
    assert boto(response, STREAM)["Error"]["Code"] == "ServiceUnavailable"
    assert wire.service_unavailable("loading").headers["retry-after"] == "1"


def test_model_error_carries_the_original_status_and_body() -> None:
    original = json.dumps({"error": {"message": "inputs: field required", "code": 422}})
    log = wire.log_stream("ep", "gemma", "rid-9")
    parsed = boto(wire.model_error(422, original, log, "rid-9"))
    assert parsed["Error"]["Code"] == "ModelError"
    assert parsed["Error"]["Message"].startswith("Received client error (422) from model with message")
    assert parsed["OriginalStatusCode"] == 422 and parsed["OriginalMessage"] == original
    assert parsed["LogStreamArn"] == log and "rid-9" in log
    assert "server error (500)" in boto(wire.model_error(500, "{}", log))["Error"]["Message"]
    long = boto(wire.model_error(500, "x" * 5000, log))
    assert len(long["Error"]["Message"]) == wire.MAX_MESSAGE and len(long["OriginalMessage"]) == 5000


def test_sse_error_events_become_model_stream_errors() -> None:
    openai = b'data: {"error": {"message": "generation failed: oom", "type": "server_error"}}\n\n'
    assert sse_error(openai) == ("generation failed: oom", eventstream.STREAM_BROKEN)
    timeout = b'data: {"error": {"message": "took too long", "type": "timeout", "code": 503}}\n\n'
    assert sse_error(timeout) == ("took too long", eventstream.TIMEOUT)
    tgi = b'data:{"error": "generation failed: oom", "error_type": "generation"}\n\n'
    assert sse_error(tgi) == ("generation failed: oom", eventstream.STREAM_BROKEN)
    token = b'data:{"token": {"text": "\\"error\\""}, "generated_text": null}\n\n'
    assert sse_error(token) is None
    assert sse_error(b"data: [DONE]\n\n") is None


def test_stream_flag_is_read_as_the_request_models_read_it() -> None:
    assert streams({"stream": True})
    assert not streams({}) and not streams({"stream": False}) and not streams({"stream": "maybe"})
    # strict, as the request models: "true" and 1 are no booleans (the model refuses them with a 422)
    assert not streams({"stream": "true"}) and not streams({"stream": 1})


def test_the_stream_call_keeps_a_stream_that_is_no_boolean_for_the_model_to_refuse() -> None:
    assert streaming_body({"inputs": "x"}, True) == {"inputs": "x", "stream": True}
    assert streaming_body({"inputs": "x", "stream": False}, True) == {"inputs": "x", "stream": True}
    assert streaming_body({"inputs": "x", "stream": {}}, True) == {"inputs": "x", "stream": {}}
    assert streaming_body({"input": "x"}, True) == {"input": "x"}
