"""The Ray ingress's data plane: a request goes to one of a component's copies over its Ray Serve
deployment handle (streaming), and its answer comes back chunk by chunk.

A copy answers `Accepted` before doing anything, so the ingress knows whether a request reached one:
one that did not (no copy took it within the wait, or the copy chosen died before taking it) may go to
another copy; one that did is never sent again, since the copy may have processed it: a failure after
that is a 502 naming what happened, and a stream cut mid-way ends with an error in the stream's format.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from starlette.responses import Response

from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.endpoint.affinity import Decision, Policy, ray_decisions
from llmhost.endpoint.bodies import Modalities
from llmhost.endpoint.dataplane import routing
from llmhost.endpoint.dataplane.routing import error
from llmhost.endpoint.dataplane.traced import traced
from llmhost.endpoint.front import FrontCounters
from llmhost.endpoint.rayserve.inprocess import Accepted, Call, Head
from llmhost.endpoint.rayserve.status import DeploymentView
from llmhost.endpoint.spec import ComponentSpec
from llmhost.web.asgi import request_id

log = logging.getLogger("llmhost.endpoint")


def why(exc: BaseException) -> str:
    """An error in one line: Ray's own run on for paragraphs (advice on OOM kills and the like)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


class RayComponent(FrontCounters):
    """A component as the ingress sees it: its deployment handle, Ray's view of its copies, its load."""

    def __init__(self, spec: ComponentSpec, handle: Any) -> None:
        super().__init__(spec.name)
        self.spec = spec
        self.handle = handle
        self.removing = False  # components are not removed from a Ray endpoint (the file defines them)
        # the LoRA adapters its deployment's user_config names (`copy_adapters`); None: the file's
        self.configured: tuple[AdapterEntry, ...] | None = None
        self.adapter_lock = asyncio.Lock()  # one change of its adapters at a time
        self.view = DeploymentView()
        # what its model reads, as a copy's /v1/models said (its copies push it with their metrics)
        self.modalities: Modalities = None

    @property
    def adapter_entries(self) -> dict[str, AdapterEntry]:
        """The LoRA adapters its copies load: the file's, or as changed at run time."""
        entries = self.spec.adapters if self.configured is None else self.configured
        return {a.name: a for a in entries}

    @property
    def adapters(self) -> frozenset[str]:
        """What requests may name in `model` to be routed here."""
        return frozenset(self.adapter_entries)

    @property
    def routing_decisions(self) -> dict[Decision, int] | None:
        """Prefix-aware routing's decisions so far, by kind; None under Ray Serve's own routing."""
        return ray_decisions(self.name) if self.spec.routing.policy == Policy.PREFIX.value else None

    @property
    def serving(self) -> bool:
        """Has a running copy, or is meant to have none (scaled to zero)."""
        return self.view.known and (self.view.running > 0 or self.view.target == 0)

    def wait_timeout_s(self) -> float:
        """How long a request waits for a copy to take it: with no copy at all (scaled to zero), the
        first one has to start."""
        if self.view.running + self.view.starting == 0:
            return self.spec.startup_health_check_timeout_s
        return self.spec.max_wait_s


class RayRelay:
    def __init__(
        self, read_timeout_s: float = 600.0, retry_pause_s: float = 0.05, retry_pause_max_s: float = 1.0
    ) -> None:
        self.read_timeout_s = read_timeout_s  # the most a copy may stay silent, as the router's read timeout
        # a request no copy took is sent again after this pause, doubling up to the max, until its wait
        # is over: a copy being replaced or started comes back within it
        self.retry_pause_s = retry_pause_s
        self.retry_pause_max_s = retry_pause_max_s

    async def forward(self, request: Request, comp: RayComponent, body: bytes) -> Response:
        return await routing.counted(comp, lambda: self._forward(request, comp, body))

    async def _take(self, comp: RayComponent, call: Call) -> tuple[Any, Accepted, float] | Response:
        """A copy that took the request: its answer's stream, who it is, and when it was sent there (the
        model latency's start). Until the component's wait is over, a request no copy took is sent again
        (nothing was done with it)."""
        comp.waiting += 1
        try:
            taken = await self._attempts(comp, call)
        finally:
            comp.waiting -= 1
        if isinstance(taken, routing.NotTaken):
            comp.no_capacity += 1
            return taken.given_up(" took the request")
        return taken

    async def _attempts(
        self, comp: RayComponent, call: Call
    ) -> tuple[Any, Accepted, float] | Response | routing.NotTaken:
        retry = routing.NotTaken(comp.name, comp.wait_timeout_s())
        pause = self.retry_pause_s
        while True:
            sent = time.monotonic()
            stream = comp.handle.options(stream=True).handle.remote(call)
            try:
                first = await asyncio.wait_for(anext(stream), retry.left_s())
            except TimeoutError:
                stream.cancel()
                break
            except Exception as exc:  # no copy took it: nothing was done, another may take it
                stream.cancel()
                retry.missed(why(exc))
            else:
                if isinstance(first, Accepted):
                    return stream, first, sent
                stream.cancel()  # not a copy of this llmhost: what it did with the request is unknown
                return error(
                    502,
                    f"a copy of inference component {comp.name!r} answered "
                    f"{type(first).__name__} before taking the request; not retried",
                    "upstream_error",
                )
            if pause >= retry.left_s():
                break
            comp.retries += 1
            log.info("request for %s not taken (%s); sending it again in %g s", comp.name, retry.last, pause)
            await asyncio.sleep(pause)
            pause = min(2 * pause, self.retry_pause_max_s)
        return retry

    async def _next(self, stream: Any) -> Any:
        return await asyncio.wait_for(anext(stream), self.read_timeout_s)

    async def _chunk(self, stream: Any) -> bytes:
        chunk = await self._next(stream)
        if not isinstance(chunk, bytes):
            raise TypeError(f"expected a chunk of the body, got {type(chunk).__name__}")
        return chunk

    async def _forward(self, request: Request, comp: RayComponent, body: bytes) -> tuple[Response, bool]:
        headers = routing.forwarded_headers(request.headers.items(), request_id(request.scope))
        span = traced(headers, request.method, request.url.path, comp.name)
        client = (request.client.host, request.client.port) if request.client else ("", 0)
        call = Call(request.method, request.url.path, request.url.query, list(headers.items()), body, client)
        started = time.monotonic()
        taken = await self._take(comp, call)
        if isinstance(taken, Response):
            return taken, False
        stream, accepted, sent = taken
        if span is not None:
            span.copy = accepted.copy

        def timed() -> None:
            now = time.monotonic()
            comp.timed_answer(now - started, now - sent)

        try:
            head = await self._next(stream)
            if not isinstance(head, Head):
                raise TypeError(f"expected the answer's head, got {type(head).__name__}")
        except Exception as exc:  # reached the copy, then failed: never sent again
            stream.cancel()
            timed_out = isinstance(exc, TimeoutError)
            return routing.taken_then_failed(comp.name, accepted.copy, why(exc), timed_out), False
        out = routing.relayed_headers(head.headers, accepted.copy)
        kind = next((v for k, v in head.headers if k.lower() == "content-type"), "")
        streamed, framed = routing.stream_kind(kind)
        if streamed:
            chunks = self._chunks(comp, accepted.copy, stream, framed, request.url.path)

            async def close() -> None:
                stream.cancel()  # the client left early: the copy stops generating
                comp.leave()
                timed()

            return routing.Relay(chunks, close, status_code=head.status, headers=out), True
        answer = await self._whole(comp, accepted.copy, stream, head, out)
        timed()
        return answer, False

    async def _whole(
        self, comp: RayComponent, copy: str, stream: Any, head: Head, out: dict[str, str]
    ) -> Response:
        content = b""
        try:
            while True:
                content += await self._chunk(stream)
        except StopAsyncIteration:
            return Response(content, status_code=head.status, headers=out)
        except Exception as exc:
            stream.cancel()
            return error(
                502,
                f"copy {copy} of inference component {comp.name!r} failed while answering: {why(exc)}",
                "upstream_error",
            )

    async def _chunks(
        self, comp: RayComponent, copy: str, stream: Any, framed: bool, path: str
    ) -> AsyncIterator[bytes]:
        tail = b"\n\n"
        try:
            while True:
                chunk = await self._chunk(stream)
                tail = chunk[-2:]
                yield chunk
        except StopAsyncIteration:
            return
        except Exception as exc:
            comp.stream_errors += 1
            log.warning("stream from copy %s cut: %s", copy, why(exc))
            message = f"copy {copy} of inference component {comp.name!r} failed mid-stream: {why(exc)}"
            for part in routing.stream_cut(message, framed, tail, path):
                yield part
