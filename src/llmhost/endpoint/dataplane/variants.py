"""A request for a component with variants: to the production variant X-Amzn-SageMaker-Target-Variant
pins, else to one drawn by weight, then to one of its copies as any component's request; its answer
names the variant (X-Amzn-Invoked-Production-Variant); shadow variants get a copy of it
(`dataplane.shadow`), compared with the answer the client got (a stream's, accumulated as it passes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable

from fastapi import Request
from starlette.responses import Response

from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.variants import INVOKED_HEADER, TARGET_HEADER, VariantError
from llmhost.endpoint.dataplane import routing
from llmhost.endpoint.dataplane.answer_text import greedy
from llmhost.endpoint.dataplane.shadow import Answer, Copied, Shadows
from llmhost.web.asgi import request_id

# the most of a streamed answer kept for the comparison; a longer one is not compared
MAX_KEPT_BYTES = 4 * 2**20

Forward = Callable[[Request, Component, bytes], Awaitable[Response]]


class VariantRouter:
    """`forward`: how a request reaches one component's copies (the router's Proxy)."""

    def __init__(self, forward: Forward, shadows: Shadows) -> None:
        self._forward = forward
        self.shadows = shadows

    async def forward(self, request: Request, front: Component, body: bytes) -> Response:
        assert front.variants is not None
        try:
            variant = front.variants.choose(request.headers.get(TARGET_HEADER))
        except VariantError as exc:
            return routing.error(400, str(exc), field=exc.field)
        variant.routed += 1
        primary = self._copy(request, front, body)
        try:
            response = await self._forward(request, variant.component, body)
        except BaseException:
            _settle(primary, None)
            raise
        response.headers[INVOKED_HEADER] = variant.name
        if primary is not None:
            _watch(response, primary)
        return response

    def _copy(self, request: Request, front: Component, body: bytes) -> asyncio.Future[Answer | None] | None:
        """Send the request to the shadow variants drawn for it; the future their comparison waits on
        (None: none was sent)."""
        assert front.variants is not None
        shadows = front.variants.copied_to()
        if not shadows:
            return None
        rid = request_id(request.scope)
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        headers = routing.forwarded_headers(request.headers.items(), f"{rid}-shadow" if rid else "")
        copied = Copied(request.method, path, headers, body, greedy(body))
        primary: asyncio.Future[Answer | None] = asyncio.get_running_loop().create_future()
        return primary if self.shadows.send(shadows, copied, primary) else None


def _settle(primary: asyncio.Future[Answer | None] | None, answer: Answer | None) -> None:
    if primary is not None and not primary.done():
        primary.set_result(answer)


def _watch(response: Response, primary: asyncio.Future[Answer | None]) -> None:
    """The primary's answer, for the shadows' comparison: at once, or a stream's once it ended."""
    content_type = response.headers.get("content-type", "")
    if not isinstance(response, routing.Relay):
        _settle(primary, Answer(response.status_code, content_type, bytes(response.body)))
        return
    kept: list[bytes] = []
    state = {"size": 0, "complete": False}

    async def tee(chunks: AsyncIterable[str | bytes | memoryview]) -> AsyncIterator[str | bytes | memoryview]:
        async for chunk in chunks:
            if state["size"] <= MAX_KEPT_BYTES:
                kept.append(chunk.encode() if isinstance(chunk, str) else bytes(chunk))
                state["size"] += len(kept[-1])
            yield chunk
        state["complete"] = True

    def ended() -> None:
        whole = state["complete"] and state["size"] <= MAX_KEPT_BYTES
        _settle(primary, Answer(response.status_code, content_type, b"".join(kept) if whole else None))

    response.body_iterator = tee(response.body_iterator)
    response.also_on_close(ended)
