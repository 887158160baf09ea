"""SageMaker Runtime's paths on the endpoint against fake copies (httpx.MockTransport): the copy's
answer is relayed untouched, an event stream cut by a dying copy ends with a ModelStreamError, and the
router's own refusals are in the shape botocore turns into its exceptions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from botocore.exceptions import EventStreamError
from fastapi import FastAPI

from llmhost.endpoint.dataplane.router import COMPONENT_HEADER, COPY_HEADER, Proxy
from llmhost.endpoint.dataplane.runtime import create_runtime_router
from llmhost.process.lifecycle import Lifecycle
from llmhost.web import eventstream
from llmhost.web.asgi import RequestContextMiddleware
from tests.unit.boto_runtime import INVOKE, STREAM, events, parse
from tests.unit.endpoint.test_router import Registry, client, component

INVOKE_PATH = "/endpoints/my-endpoint/invocations"
STREAM_PATH = "/endpoints/my-endpoint/invocations-response-stream"
PARTS = [b'data:{"token": 1}\n\n', b'data:{"token": 2}\n\n']


class CutEventStream(httpx.AsyncByteStream):
    """Two whole PayloadParts, then half of a third, then the connection drops."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        whole = b"".join(eventstream.payload_part(p) for p in PARTS)
        yield whole[:5]
        yield whole[5:]
        yield eventstream.payload_part(b"lost")[:9]
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


async def copy(request: httpx.Request) -> httpx.Response:
    if request.url.port == 666:  # dies after reading the request
        raise httpx.RemoteProtocolError("Server disconnected without a response.", request=request)
    if request.url.path == STREAM_PATH:
        return httpx.Response(200, headers={"content-type": eventstream.MEDIA_TYPE}, stream=CutEventStream())
    if request.headers.get("x-fail"):
        return httpx.Response(
            424,
            headers={"x-amzn-ErrorType": "ModelError"},
            json={"__type": "ModelError", "message": "from the copy"},
        )
    return httpx.Response(200, json={"path": request.url.path, "port": request.url.port})


def app_for(registry: Registry) -> FastAPI:
    app = FastAPI()
    app.include_router(
        create_runtime_router(
            registry, Proxy(registry, httpx.AsyncClient(transport=httpx.MockTransport(copy)))
        )
    )
    app.add_middleware(RequestContextMiddleware, lifecycle=Lifecycle())  # request ids, as in the endpoint
    return app


async def test_the_copy_answers_on_the_same_path_and_is_relayed(tmp_path: Path) -> None:
    reg = Registry(component("a", [1001], tmp_path), component("b", [2001], tmp_path))
    async with client(app_for(reg)) as c:
        r = await c.post(INVOKE_PATH, headers={COMPONENT_HEADER: "b"}, json={"inputs": "hi"})
        assert r.json() == {"path": INVOKE_PATH, "port": 2001} and r.headers[COPY_HEADER] == "b-0"
        r = await c.post(INVOKE_PATH, headers={COMPONENT_HEADER: "a", "x-fail": "1"}, json={})
        assert r.status_code == 424 and r.json()["message"] == "from the copy"


async def test_an_event_stream_cut_by_a_dying_copy_ends_with_a_model_stream_error(tmp_path: Path) -> None:
    comp = component("a", [1001], tmp_path)
    async with client(app_for(Registry(comp))) as c:
        r = await c.post(STREAM_PATH, json={"inputs": "hi"})
    assert r.status_code == 200 and r.headers["content-type"] == eventstream.MEDIA_TYPE
    got = []
    with pytest.raises(EventStreamError) as caught:
        for event in events(r.content):
            got.append(event["PayloadPart"]["Bytes"])
    assert got == PARTS
    error = caught.value.response["Error"]
    assert error["Code"] == "ModelStreamError"
    assert "copy a-0 of inference component 'a' failed mid-stream" in error["Message"]
    assert comp.stream_errors == 1 and comp.in_flight == 0 and comp.replicas[0].outstanding == 0


async def test_router_refusals_are_botocore_errors(tmp_path: Path) -> None:
    reg = Registry(
        component("a", [1001], tmp_path),
        component("b", [], tmp_path),
        component("dies", [666], tmp_path),
        wait_s=0.2,
    )
    async with client(app_for(reg)) as c:
        unknown = await c.post(INVOKE_PATH, headers={COMPONENT_HEADER: "zz"}, json={})
        unnamed = await c.post(STREAM_PATH, json={})
        no_copy = await c.post(INVOKE_PATH, headers={COMPONENT_HEADER: "b"}, json={})
        headers = {COMPONENT_HEADER: "dies", "X-Request-Id": "r1"}
        died = await c.post(INVOKE_PATH, headers=headers, json={})

    def boto(r: httpx.Response, operation: str = INVOKE) -> dict[str, object]:
        return parse(r.status_code, dict(r.headers), r.content, operation)

    parsed = boto(unknown)
    message = "unknown inference component 'zz'; known components: a, b, dies"
    assert parsed["Error"] == {"Code": "ValidationError", "Message": message}
    assert unnamed.status_code == 400 and boto(unnamed, STREAM)["Error"]["Code"] == "ValidationError"
    assert COMPONENT_HEADER in boto(unnamed, STREAM)["Error"]["Message"]
    assert no_copy.status_code == 503 and no_copy.headers["retry-after"] == "1"
    assert boto(no_copy)["Error"]["Code"] == "ServiceUnavailable"
    parsed = boto(died)
    assert died.status_code == 424 and parsed["Error"]["Code"] == "ModelError"
    assert parsed["OriginalStatusCode"] == 502 and "not retried" in str(parsed["OriginalMessage"])
    assert parsed["LogStreamArn"] == "llmhost/endpoints/my-endpoint/dies/requests/r1"
    assert parsed["ResponseMetadata"]["RequestId"] == "r1"
