"""The runtime layer of one server over a fake /invocations: what it forwards, and how each answer
comes out as boto3 reads it (no model: the real dispatch is exercised by the integration tests)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import EventStreamError
from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.responses import JSONResponse, Response, StreamingResponse

from llmhost.engine.request import QueueFullError
from llmhost.server.serving.apis.runtime import Runtime
from llmhost.web.errors import APIError
from tests.unit.boto_runtime import INVOKE, STREAM, events, parse

TOKEN = b'data:{"token": {"text": "Hi"}}\n\n'
FAILED = b'data:{"error": "generation failed: boom", "error_type": "generation"}\n\n'


class Strict(BaseModel):
    inputs: str


def app_with(answer: Any, seen: list[dict[str, Any]]) -> FastAPI:
    """`answer` for every body: an exception to raise, "pydantic" to fail validation, a Response, or
    a function making one."""

    async def read(request: Request) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(await request.body())
        return body

    async def dispatch(request: Request, body: dict[str, Any]) -> Response:
        seen.append(body)
        if isinstance(answer, BaseException):
            raise answer
        if answer == "pydantic":
            Strict.model_validate(body)
        return answer if isinstance(answer, Response) else answer()

    runtime = Runtime("gemma", read, dispatch)
    app = FastAPI()

    @app.post("/endpoints/{name}/invocations")
    async def invoke(name: str, request: Request) -> Response:
        return await runtime.invoke(request, name, stream=False)

    @app.post("/endpoints/{name}/invocations-response-stream")
    async def stream(name: str, request: Request) -> Response:
        return await runtime.invoke(request, name, stream=True)

    return app


async def post(app: FastAPI, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        return await c.post(f"/endpoints/ep/{path}", json=body, headers=headers)


def boto(r: httpx.Response, operation: str = INVOKE) -> dict[str, Any]:
    return parse(r.status_code, dict(r.headers), r.content, operation)


async def test_overload_is_service_unavailable_and_refusals_are_model_errors() -> None:
    full = APIError(429, "queue full", "rate_limit_error", headers={"Retry-After": "2"})
    r = await post(app_with(full, []), "invocations", {"inputs": "x"})
    assert r.status_code == 503 and r.headers["retry-after"] == "2"
    assert boto(r)["Error"] == {"Code": "ServiceUnavailable", "Message": "queue full"}
    r = await post(app_with(QueueFullError(4, 4), []), "invocations", {"inputs": "x"})
    message = "queue full: 4 requests in flight, limit 4"
    assert boto(r)["Error"] == {"Code": "ServiceUnavailable", "Message": message}
    parsed = boto(await post(app_with("pydantic", []), "invocations", {"inputs": 3}))
    assert parsed["Error"]["Code"] == "ModelError" and parsed["OriginalStatusCode"] == 422
    assert json.loads(parsed["OriginalMessage"])["error"]["field"] == "inputs"
    failed = JSONResponse({"error": {"message": "generation failed"}}, status_code=500)
    parsed = boto(await post(app_with(failed, []), "invocations", {"inputs": "x"}))
    assert parsed["OriginalStatusCode"] == 500
    assert parsed["OriginalMessage"] == '{"error":{"message":"generation failed"}}'


async def test_stream_is_forced_on_for_generation_bodies_only() -> None:
    seen: list[dict[str, Any]] = []
    app = app_with(lambda: JSONResponse({"data": [1.0]}), seen)
    await post(app, "invocations-response-stream", {"inputs": "x"})
    await post(app, "invocations-response-stream", {"messages": [], "stream": False})
    r = await post(app, "invocations-response-stream", {"input": "embed me"})
    assert [b.get("stream") for b in seen] == [True, True, None]
    # an answer that does not stream still comes as one PayloadPart
    assert [e["PayloadPart"]["Bytes"] for e in events(r.content)] == [b'{"data":[1.0]}']
    assert r.headers["x-amzn-sagemaker-content-type"] == "application/json"


async def test_a_generation_failing_mid_stream_ends_with_a_model_stream_error() -> None:
    closed: list[bool] = []

    async def chunks() -> AsyncIterator[str]:
        try:
            yield TOKEN.decode()
            yield FAILED.decode()
        finally:
            closed.append(True)

    app = app_with(lambda: StreamingResponse(chunks(), media_type="text/event-stream"), [])
    r = await post(app, "invocations-response-stream", {"inputs": "x"}, **{"X-Amzn-SageMaker-Accept": "*/*"})
    assert r.headers["content-type"] == "application/vnd.amazon.eventstream"
    assert r.headers["x-amzn-invoked-production-variant"] == "AllTraffic"
    assert boto(r, STREAM)["ContentType"].startswith("text/event-stream")
    got = []
    with pytest.raises(EventStreamError) as caught:
        for event in events(r.content):
            got.append(event["PayloadPart"]["Bytes"])
    assert got == [TOKEN] and closed == [True]
    error = caught.value.response["Error"]
    assert error == {"Code": "ModelStreamError", "Message": "generation failed: boom"}
