"""The request-context middleware every llmhost HTTP process wears, around apps that misbehave."""

from __future__ import annotations

import httpx
from starlette.types import Receive, Scope, Send

from llmhost.process.lifecycle import Lifecycle
from llmhost.web.asgi import RequestContextMiddleware


async def broken(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("a bug")


async def fine(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def client(app: RequestContextMiddleware) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_an_unexpected_error_is_a_json_500_naming_the_request_id() -> None:
    async with client(RequestContextMiddleware(broken, Lifecycle())) as c:
        r = await c.post("/anything", headers={"X-Request-Id": "req-42"})
    assert r.status_code == 500 and r.headers["x-request-id"] == "req-42"
    err = r.json()["error"]
    assert err["request_id"] == "req-42" and "RuntimeError" in err["message"] and err["code"] == 500


async def test_ids_are_made_when_missing_and_requests_refused_while_draining() -> None:
    lifecycle = Lifecycle()
    async with client(RequestContextMiddleware(fine, lifecycle, open_paths={"/ping"})) as c:
        r = await c.get("/x")
        assert r.status_code == 200 and len(r.headers["x-request-id"]) == 32
        lifecycle.drain("test")
        r = await c.post("/x")
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["request_id"] == r.headers["x-request-id"]
        assert (await c.get("/ping")).status_code == 200  # open paths answer for themselves
