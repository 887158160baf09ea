"""ASGI middleware of a replica: SageMaker's 6 MB body limit and custom-attributes pass-through
(request ids and the JSON 500 come from `llmhost.web.asgi`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmhost.web.asgi import send_error
from llmhost.web.errors import error_body

CUSTOM_ATTRIBUTES = b"x-amzn-sagemaker-custom-attributes"


class _TooLarge(Exception):
    pass


def _too_large_body(limit: int, size: int | None) -> dict[str, Any]:
    got = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return error_body(413, f"request body is {got}; the limit is {limit} bytes", field="body", limit=limit)


class BodyLimitMiddleware:
    """413 for a body over `max_bytes` (or its path's own limit in `paths`: an upload's), in the format
    of the route's API (`routes`: the app's)."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        routes: Sequence[BaseRoute] = (),
        paths: Mapping[str, int] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.routes = routes
        self.paths = dict(paths or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.paths.get(scope["path"], self.max_bytes)
        headers = dict(scope.get("headers", []))
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._refuse(scope, send, int(length), limit)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(scope, send, None, limit)

    async def _refuse(self, scope: Scope, send: Send, size: int | None, limit: int) -> None:
        await send_error(send, scope, self.routes, 413, _too_large_body(limit, size), [])


class CustomAttributesMiddleware:
    """SageMaker passes X-Amzn-SageMaker-Custom-Attributes through the container untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        value = dict(scope.get("headers", [])).get(CUSTOM_ATTRIBUTES)
        if value is None:
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (CUSTOM_ATTRIBUTES, value)]
            await send(message)

        await self.app(scope, receive, send_with_header)
