"""ASGI pieces every llmhost HTTP process shares (replica and endpoint router): request ids, a JSON
500 for any unexpected error, and refusing requests while draining."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Sequence

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmhost.process.lifecycle import Lifecycle
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import RETRY_AFTER_S, error_body
from llmhost.web.formats import around_format

log = logging.getLogger("llmhost")

REQUEST_ID = b"x-request-id"
# a client's id is echoed only if it is short and plain (it ends up in logs and headers)
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")
# probes keep answering while draining: /ping says 503 itself, the others report state
OPEN_WHILE_DRAINING = {"/ping", "/health", "/metrics"}


async def send_json(send: Send, status: int, body: JSONObject, headers: list[tuple[bytes, bytes]]) -> None:
    raw = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": raw})


async def send_error(
    send: Send,
    scope: Scope,
    routes: Sequence[BaseRoute],
    status: int,
    body: JSONObject,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """A refusal made before the route runs (`body` in OpenAI's shape), in the format of the route's API
    (web/formats.py); `routes`: the app's, to find it."""
    status, written = around_format(scope, routes).convert(status, body)
    await send_json(send, status, written, headers)


def request_id(scope: Scope) -> str:
    """The id the middleware gave this request (the client's X-Request-Id, else a new one)."""
    return str(scope.get("state", {}).get("request_id", ""))


class RequestContextMiddleware:
    """Outermost: gives every request an id (a valid X-Request-Id is kept, else one is made) echoed
    in the response, refuses new requests while draining (503 + Retry-After), and turns any
    exception that escaped the app into a JSON 500 naming the id, with the traceback logged: never
    plain text, never a dropped connection. `routes`: the app's, whose API's format each refusal takes."""

    def __init__(
        self,
        app: ASGIApp,
        lifecycle: Lifecycle,
        open_paths: set[str] = OPEN_WHILE_DRAINING,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.app = app
        self.lifecycle = lifecycle
        self.open_paths = open_paths
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers", [])).get(REQUEST_ID, b"").decode("latin-1")
        rid = given if _CLIENT_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        id_header = (REQUEST_ID, rid.encode())
        if not self.lifecycle.accepting and scope["path"] not in self.open_paths:
            body = error_body(
                503,
                "the server is shutting down; retry on another replica",
                "service_unavailable",
                request_id=rid,
            )
            await send_error(
                send,
                scope,
                self.routes,
                503,
                body,
                [id_header, (b"retry-after", str(RETRY_AFTER_S).encode())],
            )
            return
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), id_header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            log.exception("request %s (%s %s) failed", rid, scope.get("method"), scope.get("path"))
            if not started:  # once a response began, its stream reports errors in its own format
                message = f"internal server error ({type(exc).__name__}); request id {rid}"
                body = error_body(500, message, "server_error", request_id=rid)
                await send_error(send, scope, self.routes, 500, body, [id_header])
