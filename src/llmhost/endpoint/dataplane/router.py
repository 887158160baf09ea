"""The endpoint's data plane: picks a component, then one of its ready copies (the least loaded, or with
prefix-aware routing the one holding the prompt's prefix: `llmhost.endpoint.affinity`), and relays.

`/invocations` and the TGI / tokenizer routes name the component in `X-Amzn-SageMaker-Inference-Component`
(optional with one component); OpenAI, Anthropic Messages and Responses routes name it in the body's
`model`. Streams pass through chunk by chunk. Only a request that provably never reached a copy (the
connection could not be made) is sent to another; one that reached a copy is never sent again, since
the copy may have processed it: it gets a 502 naming what happened, and a stream cut by a dying copy
ends with an error event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import httpx
from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.endpoint import apidoc
from llmhost.endpoint.bodies import ModelEntry, ModelList
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.replica import Replica
from llmhost.endpoint.dataplane import keepalive, routing
from llmhost.endpoint.dataplane.ollama import Listed, context_length, ollama_routes
from llmhost.endpoint.dataplane.ollama_folder import ModelsFolder
from llmhost.endpoint.dataplane.routing import (
    COMPONENT_HEADER,
    COPY_HEADER,
    by_header,
    by_model,
    error,
    error_event,
    known,
)
from llmhost.endpoint.dataplane.shadow import Shadows
from llmhost.endpoint.dataplane.traced import traced
from llmhost.endpoint.dataplane.variants import VariantRouter
from llmhost.endpoint.spec import ClientKeepAlive
from llmhost.process.lifecycle import KEEP_ALIVE_S, Lifecycle
from llmhost.web import eventstream
from llmhost.web.asgi import request_id

log = logging.getLogger("llmhost.endpoint")

# the request was never written to the copy: safe to send elsewhere. Anything later (a reset, a
# closed keep-alive connection, a read error) may come after the copy read the request: not retried
NOT_STARTED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

__all__ = [
    "COMPONENT_HEADER",
    "COPY_HEADER",
    "Proxy",
    "Registry",
    "by_header",
    "by_model",
    "create_router",
    "error",
    "error_event",
    "known",
]


class Registry(Protocol):
    components: dict[str, Component]

    def copy_wanted(self, component: Component) -> None:
        """A request waits for a copy of `component` (scale from zero)."""

    def wait_timeout_s(self, component: Component) -> float:
        """How long a request may wait for a ready copy."""

    @property
    def client_keep_alive(self) -> ClientKeepAlive:
        """Who may set an on-demand model's keep_alive per request."""


# idle connections to copies dropped well before a copy closes them (KEEP_ALIVE_S): at equal timeouts
# (httpx's and uvicorn's default, 5 s) a request sent on a connection the copy is closing fails with
# "Server disconnected" and, possibly processed, is not retried: a 502
POOL_LIMITS = httpx.Limits(
    max_connections=None, max_keepalive_connections=64, keepalive_expiry=KEEP_ALIVE_S / 2
)


class Proxy:
    def __init__(
        self, registry: Registry, client: httpx.AsyncClient | None = None, max_attempts: int = 4
    ) -> None:
        self.registry = registry
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=None),
            limits=POOL_LIMITS,
        )
        self.max_attempts = max_attempts
        self.variants = VariantRouter(self.forward, Shadows(self.client))

    async def aclose(self) -> None:
        await self.variants.shadows.aclose()
        await self.client.aclose()

    async def _choose(
        self, comp: Component, tried: set[str], deadline: float, prefix: list[bytes]
    ) -> Replica | None:
        replica = comp.pick(tried, prefix)
        if replica is not None:
            return replica
        comp.waiting += 1
        self.registry.copy_wanted(comp)
        try:
            while (
                replica is None and time.monotonic() < deadline and not comp.removing and comp.refusal is None
            ):
                replica = await comp.wait_for_copy(deadline - time.monotonic(), tried, prefix)
        finally:
            comp.waiting -= 1
        return replica

    async def forward(self, request: Request, comp: Component, body: bytes) -> Response:
        if comp.variants is not None:  # to one of its variants, which comes back here
            return await self.variants.forward(request, comp, body)
        if comp.demand is not None:
            try:
                policy = self.registry.client_keep_alive
                body, asked = keepalive.check(body, policy, comp.demand.spec.keep_alive, comp.name)
            except keepalive.KeepAliveError as exc:
                return error(exc.status, str(exc), field=keepalive.FIELD)
            comp.demand.request_keep_alive = asked
        return await routing.counted(comp, lambda: self._forward(request, comp, body))

    async def _forward(self, request: Request, comp: Component, body: bytes) -> tuple[Response, bool]:
        headers = routing.forwarded_headers(request.headers.items(), request_id(request.scope))
        span = traced(headers, request.method, request.url.path, comp.name)
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        retry = routing.NotTaken(comp.name, self.registry.wait_timeout_s(comp))
        tried: set[str] = set()
        started = time.monotonic()
        prefix = comp.prefix_hashes(body)
        for attempt in range(self.max_attempts):
            replica = await self._choose(comp, tried, retry.deadline, prefix)
            if replica is None:
                refusal = comp.refusal
                if refusal is not None:  # its load failed: why, for every request that waited
                    return error(refusal.status, refusal.message, refusal.type, field="model"), False
                comp.no_capacity += 1
                return retry.given_up(), False
            # the copy's key now: its supervisor may restart it while the connection is refused, and
            # the new copy (a new key) must stay eligible for this request's next attempt
            key = replica.key
            if span is not None:
                span.copy = replica.id
            replica.outstanding += 1
            replica.served += 1
            upstream_req = self.client.build_request(
                request.method, replica.url + path, content=body, headers=headers
            )
            sent = time.monotonic()
            try:
                upstream = await self.client.send(upstream_req, stream=True)
            except NOT_STARTED as exc:
                replica.outstanding -= 1
                replica.poke()
                tried.add(key)
                retry.missed(f"copy {replica.id}: {type(exc).__name__}: {exc}")
                if attempt + 1 < self.max_attempts:
                    comp.retries += 1
                    log.info("request to %s not started (%s); retrying on another copy", replica.id, exc)
                continue
            except httpx.HTTPError as exc:  # reached the copy, then failed: never replayed
                replica.outstanding -= 1
                replica.poke()
                timed_out = isinstance(exc, httpx.TimeoutException)
                why = f"{type(exc).__name__}: {exc}"
                return routing.taken_then_failed(comp.name, replica.id, why, timed_out), False
            except BaseException:
                replica.outstanding -= 1
                raise
            return await self._relay(comp, replica, upstream, (started, sent))
        msg = (
            f"inference component {comp.name!r}: no copy accepted the request after "
            f"{self.max_attempts} attempts; last failure: {retry.last}"
        )
        return error(502, msg, "upstream_error"), False

    async def _relay(
        self, comp: Component, replica: Replica, upstream: httpx.Response, times: tuple[float, float]
    ) -> tuple[Response, bool]:
        """`times`: when the request arrived and when it was sent to the copy (for the latencies)."""
        out_headers = routing.relayed_headers(upstream.headers.items(), replica.id)
        closed = False
        started, sent = times

        async def close() -> None:
            nonlocal closed
            if closed:
                return
            closed = True
            await upstream.aclose()
            replica.outstanding -= 1
            comp.leave()
            now = time.monotonic()
            comp.timed_answer(now - started, now - sent)

        streamed, framed = routing.stream_kind(upstream.headers.get("content-type", ""))
        if streamed:
            chunks = _stream(comp, replica, upstream, framed=framed)
            return routing.Relay(chunks, close, status_code=upstream.status_code, headers=out_headers), True
        try:
            content = await upstream.aread()
        except httpx.HTTPError as exc:
            replica.poke()
            return error(
                502,
                f"copy {replica.id} of inference component {comp.name!r} failed while "
                f"answering: {type(exc).__name__}: {exc}",
                "upstream_error",
            ), False
        finally:
            await upstream.aclose()
            replica.outstanding -= 1
        now = time.monotonic()
        comp.timed_answer(now - started, now - sent)
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
        message = (
            f"copy {replica.id} of inference component {comp.name!r} failed mid-stream: "
            f"{type(exc).__name__}: {exc}"
        )
        for part in routing.stream_cut(message, framed, tail, upstream.request.url.path):
            yield part


def _model_entry(name: str, comp: Component) -> ModelEntry:
    """A component in /v1/models; an on-demand model with its state and the room it takes when loaded."""
    entry = routing.model_entry(name, len(comp.capacity()), len(comp.ready()))
    d = comp.demand
    if d is not None:
        res = comp.spec.resources
        entry["state"], entry["pinned"], entry["keep_alive"] = comp.state.value, d.spec.pinned, d.keep_alive
        entry["resources"] = {"num_cpus": res.num_cpus, "memory_mb": res.memory_mb}
    return entry


def _listed(registry: Registry) -> list[Listed]:
    """The components as Ollama's /api/tags and /api/ps show them."""
    now, out = time.monotonic(), []
    for c in registry.components.values():
        if c.removing:
            continue
        d = c.demand
        forever = d is None or d.spec.pinned or d.keep_alive < 0
        expires = None if forever or d is None else d.keep_alive - c.idle_for(now)
        n_ctx = context_length(c.spec.engine.serve_options())
        out.append(Listed(c.name, c.model.gguf, bool(c.ready()), expires, n_ctx))
        out += [
            Listed(a.name, Path(a.path), bool(c.ready()), expires, n_ctx, parent=c.name)
            for a in c.adapter_list()
        ]
    return out


def create_router(
    registry: Registry, proxy: Proxy, lifecycle: Lifecycle, folder: ModelsFolder | None = None
) -> APIRouter:
    """`folder`: the models_dir, where Ollama's /api/copy and /api/delete act."""
    router = APIRouter()

    @router.get("/ping", openapi_extra=apidoc.PING)
    async def ping() -> Response:
        serving = {c.name: c.serving for c in registry.components.values() if not c.removing}
        return routing.ping(lifecycle.accepting, serving)

    @router.get("/v1/models", openapi_extra=apidoc.MODELS)
    async def models() -> Response:
        live = [(name, c) for name, c in registry.components.items() if not c.removing]
        data = [
            entry
            for name, c in live
            for entry in (
                _model_entry(name, c),
                *routing.adapter_entries(c, len(c.capacity()), len(c.ready())),
            )
        ]
        listed: ModelList = {"object": "list", "data": data}
        return JSONResponse(listed)

    router.include_router(routing.data_routes(registry, proxy))
    router.include_router(ollama_routes(lambda: _listed(registry), folder))
    return router
