"""The endpoint's data plane: picks a component, then its least-loaded ready copy, and relays.

`/invocations` and the TGI / tokenizer routes name the component in `X-Amzn-SageMaker-Inference-Component`
(optional with one component); OpenAI routes name it in the body's `model`. Streams pass through chunk
by chunk. Only a request that provably never reached a copy (the connection could not be made) is sent
to another; one that reached a copy is never sent again, since the copy may have processed it: it
gets a 502 naming what happened, and a stream cut by a dying copy ends with an error event.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import httpx
from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from llmhost import eventstream
from llmhost.asgi import request_id
from llmhost.endpoint.component import Component
from llmhost.endpoint.metrics import render_metrics
from llmhost.endpoint.replica import Replica
from llmhost.lifecycle import Lifecycle

log = logging.getLogger("llmhost.endpoint")

COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"
COPY_HEADER = "X-Llmhost-Copy"
HOP_BY_HOP = {
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer",
    "upgrade", "proxy-authorization", "proxy-authenticate", "accept-encoding",
    # credentials stop at the router: copies on private ports never see a client's key
    "authorization", "x-api-key",
}  # fmt: skip
DROP_RESPONSE = {"content-length", "connection", "keep-alive", "transfer-encoding", "date", "server"}
# the request was never written to the copy: safe to send elsewhere. Anything later (a reset, a
# closed keep-alive connection, a read error) may come after the copy read the request: not retried
NOT_STARTED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# what TGI's clients put in `model` when the user named none (huggingface_hub with a base_url: "dummy";
# TGI's messages API: "tgi"): the header or the only component decides, as without a model
UNNAMED_MODELS = frozenset({"tgi", "dummy"})


class Registry(Protocol):
    components: dict[str, Component]

    def copy_wanted(self, component: Component) -> None:
        """A request waits for a copy of `component` (scale from zero)."""

    def wait_timeout_s(self, component: Component) -> float:
        """How long a request may wait for a ready copy."""


def error(status: int, message: str, type_: str = "invalid_request_error", field: str | None = None,
          **extra: Any) -> JSONResponse:  # fmt: skip
    body: dict[str, Any] = {"message": message, "type": type_, "param": field, "code": status}
    if field is not None:
        body["field"] = field
    body.update(extra)
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def error_event(message: str, status: int = 502) -> bytes:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": status}}
    return f"data: {json.dumps(body)}\n\n".encode()


class _Relay(StreamingResponse):
    """A streaming response that always runs `on_close`, even when the client left before the body."""

    def __init__(
        self, body: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]], **kw: Any
    ) -> None:
        super().__init__(body, **kw)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()


def known(registry: Registry) -> str:
    names = sorted(n for n, c in registry.components.items() if not c.removing)
    return ", ".join(names) or "(none)"


def _unknown(registry: Registry, name: str, field: str) -> JSONResponse:
    return error(404, f"unknown inference component {name!r}; known components: {known(registry)}",
                 "not_found_error", field=field)  # fmt: skip


def _only(registry: Registry) -> Component | None:
    live = [c for c in registry.components.values() if not c.removing]
    return live[0] if len(live) == 1 else None


def by_header(registry: Registry, headers: Mapping[str, str]) -> Component | JSONResponse:
    name = headers.get(COMPONENT_HEADER)
    if name:
        comp = registry.components.get(name)
        if comp is None or comp.removing:
            return _unknown(registry, name, COMPONENT_HEADER)
        return comp
    only = _only(registry)
    if only is not None:
        return only
    return error(400, f"several inference components are deployed; name one in the {COMPONENT_HEADER} "
                 f"header: {known(registry)}", field=COMPONENT_HEADER)  # fmt: skip


def by_model(registry: Registry, body: bytes, headers: Mapping[str, str]) -> Component | JSONResponse:
    """The body's `model` names the component; else the header; else the only component."""
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read: the copy says why
        data = None
    model = data.get("model") if isinstance(data, dict) else None
    if isinstance(model, str) and model and model not in UNNAMED_MODELS:
        comp = registry.components.get(model)
        if comp is not None and not comp.removing:
            return comp
        if not headers.get(COMPONENT_HEADER):
            return _unknown(registry, model, "model")
    return by_header(registry, headers)


class Proxy:
    def __init__(
        self, registry: Registry, client: httpx.AsyncClient | None = None, max_attempts: int = 4
    ) -> None:
        self.registry = registry
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        self.max_attempts = max_attempts

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _choose(self, comp: Component, tried: set[str], deadline: float) -> Replica | None:
        replica = comp.pick(tried)
        if replica is not None:
            return replica
        comp.waiting += 1
        self.registry.copy_wanted(comp)
        try:
            while replica is None and time.monotonic() < deadline and not comp.removing:
                replica = await comp.wait_for_copy(deadline - time.monotonic(), tried)
        finally:
            comp.waiting -= 1
        return replica

    async def forward(self, request: Request, comp: Component, body: bytes) -> Response:
        comp.enter()
        release_later = False
        try:
            response, release_later = await self._forward(request, comp, body)
            comp.requests[response.status_code] += 1
            return response
        finally:
            if not release_later:
                comp.leave()

    async def _forward(self, request: Request, comp: Component, body: bytes) -> tuple[Response, bool]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        # the copy logs and echoes the same id as the router
        headers["x-request-id"] = request_id(request.scope) or headers.get("x-request-id", "")
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        timeout = self.registry.wait_timeout_s(comp)
        deadline = time.monotonic() + timeout
        tried: set[str] = set()
        last_error = ""
        for attempt in range(self.max_attempts):
            replica = await self._choose(comp, tried, deadline)
            if replica is None:
                why = f"; last failure: {last_error}" if last_error else ""
                return error(503, f"no ready copy of inference component {comp.name!r} within {timeout:g} s"
                             f"{why}", "service_unavailable"), False  # fmt: skip
            replica.outstanding += 1
            replica.served += 1
            upstream_req = self.client.build_request(request.method, replica.url + path, content=body,
                                                     headers=headers)  # fmt: skip
            try:
                upstream = await self.client.send(upstream_req, stream=True)
            except NOT_STARTED as exc:
                replica.outstanding -= 1
                replica.poke()
                tried.add(replica.key)
                last_error = f"copy {replica.id}: {type(exc).__name__}: {exc}"
                if attempt + 1 < self.max_attempts:
                    comp.retries += 1
                    log.info("request to %s not started (%s); retrying on another copy", replica.id, exc)
                continue
            except httpx.HTTPError as exc:  # reached the copy, then failed: never replayed
                replica.outstanding -= 1
                replica.poke()
                status = 504 if isinstance(exc, httpx.TimeoutException) else 502
                msg = (f"copy {replica.id} of inference component {comp.name!r} failed after the request "
                       f"reached it ({type(exc).__name__}: {exc}); not retried, it may have been processed")
                return error(status, msg, "upstream_error"), False  # fmt: skip
            except BaseException:
                replica.outstanding -= 1
                raise
            return await self._relay(comp, replica, upstream)
        msg = (
            f"inference component {comp.name!r}: no copy accepted the request after "
            f"{self.max_attempts} attempts; last failure: {last_error}"
        )
        return error(502, msg, "upstream_error"), False

    async def _relay(
        self, comp: Component, replica: Replica, upstream: httpx.Response
    ) -> tuple[Response, bool]:
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in DROP_RESPONSE}
        out_headers[COPY_HEADER] = replica.id
        closed = False

        async def close() -> None:
            nonlocal closed
            if closed:
                return
            closed = True
            await upstream.aclose()
            replica.outstanding -= 1
            comp.leave()

        kind = upstream.headers.get("content-type", "")
        if kind.startswith(("text/event-stream", eventstream.MEDIA_TYPE)):
            chunks = _stream(comp, replica, upstream, framed=kind.startswith(eventstream.MEDIA_TYPE))
            return _Relay(chunks, close, status_code=upstream.status_code, headers=out_headers), True
        try:
            content = await upstream.aread()
        except httpx.HTTPError as exc:
            replica.poke()
            return error(502, f"copy {replica.id} of inference component {comp.name!r} failed while "
                         f"answering: {type(exc).__name__}: {exc}", "upstream_error"), False  # fmt: skip
        finally:
            await upstream.aclose()
            replica.outstanding -= 1
        return Response(content, status_code=upstream.status_code, headers=out_headers), False


async def _stream(
    comp: Component, replica: Replica, upstream: httpx.Response, framed: bool
) -> AsyncIterator[bytes]:
    """The copy's stream as it comes, ending with an error in the stream's own format if the copy
    fails mid-way: an SSE error event, or a ModelStreamError in an event stream (`framed`), which is
    relayed in whole messages so that the error appended after the last one still decodes."""
    chunks = eventstream.whole_messages(upstream.aiter_raw()) if framed else upstream.aiter_raw()
    tail = b"\n\n"
    try:
        async for chunk in chunks:
            if chunk:
                tail = chunk[-2:]
                yield chunk
    except (httpx.HTTPError, eventstream.MalformedStream) as exc:
        comp.stream_errors += 1
        replica.poke()
        log.warning("stream from copy %s cut: %s", replica.id, exc)
        message = (f"copy {replica.id} of inference component {comp.name!r} failed mid-stream: "
                   f"{type(exc).__name__}: {exc}")  # fmt: skip
        if framed:
            yield eventstream.model_stream_error(message, eventstream.STREAM_BROKEN)
            return
        if tail != b"\n\n":
            yield b"\n\n"
        yield error_event(message)


def create_router(registry: Registry, proxy: Proxy, lifecycle: Lifecycle) -> APIRouter:
    router = APIRouter()

    @router.get("/ping")
    async def ping() -> Response:
        if not lifecycle.accepting:
            return error(503, "endpoint shutting down", "service_unavailable")
        comps = [c for c in registry.components.values() if not c.removing]
        waiting = [c.name for c in comps if not c.serving]
        if comps and not waiting:
            return Response(status_code=200)
        why = f"no ready copy of {', '.join(waiting)}" if comps else "no inference component"
        return error(503, f"endpoint not ready: {why}", "service_unavailable")

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "owned_by": "llmhost", "created": 0,
                 "copies": len(c.capacity()), "ready": len(c.ready())}
                for name, c in registry.components.items() if not c.removing
            ],
        }  # fmt: skip

    @router.get("/metrics")
    async def metrics() -> Response:
        text = await render_metrics(list(registry.components.values()), proxy.client)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def route_header(request: Request) -> Response:
        picked = by_header(registry, request.headers)
        if isinstance(picked, Response):
            return picked
        return await proxy.forward(request, picked, await request.body())

    async def route_model(request: Request) -> Response:
        body = await request.body()
        picked = by_model(registry, body, request.headers)
        if isinstance(picked, Response):
            return picked
        return await proxy.forward(request, picked, body)

    for path in ("/invocations", "/", "/generate", "/generate_stream", "/tokenize", "/detokenize"):
        router.add_api_route(path, route_header, methods=["POST"], include_in_schema=False)
    router.add_api_route("/info", route_header, methods=["GET"], include_in_schema=False)
    for path in ("/v1/completions", "/v1/chat/completions", "/v1/embeddings"):
        router.add_api_route(path, route_model, methods=["POST"], include_in_schema=False)
    return router
