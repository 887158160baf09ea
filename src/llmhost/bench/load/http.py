"""HTTP for the load generator and its probes, over aiohttp.

The load generator must never be the bottleneck: its target is ≥ 1,000 streamed requests/s on one
core. ``benchmarks/http_client_rate.py`` measures this module against that target (16 SSE token
events per answer, concurrency 64, fake server and client pinned to separate cores; figures in
``benchmarks/results/http_client_rate.json``). On a quiet 2-core Xeon (Sapphire Rapids): this module
6,663 req/s at 150 µs of client CPU per request, aiohttp used directly 6,475, httpx 276; the whole
load generator (``benchmarks/loadgen_rate.py``: records, SSE parsing, closed loop) 5,015 req/s.
aiohttp reaching the target, the hand-written HTTP/1.1 client this module used to be (6,078 req/s
against aiohttp's 4,519 on the same benchmark, on an EPYC under load) was replaced by it; httpx
cannot reach the target.

A request is prepared once (:class:`HttpRequest`) and sent many times through a session whose
connector keeps connections alive; the body is read chunk by chunk as it arrives, so each token
event is timed when it reaches the client. Failures become :class:`HttpClientError` with a kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from urllib.parse import urlsplit

import aiohttp
from aiohttp import http_exceptions

from llmhost.errors import LlmhostError


class HttpClientError(LlmhostError):
    """A failure of the connection or of the HTTP framing (not an HTTP error status)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: scheme, host, port and the path prefix of a base URL."""

    scheme: str
    host: str
    port: int
    prefix: str  # path of the URL without a trailing slash ("" for the root)

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {url!r} (http or https)")
        if not parts.hostname:
            raise ValueError(f"no host in URL {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host_header}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}{self.prefix}"


@dataclass(frozen=True)
class HttpRequest:
    """A request built once and sent many times."""

    method: str
    url: str
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def prepare(
    endpoint: Endpoint, method: str, path: str, body: bytes | None, headers: dict[str, str] | None = None
) -> HttpRequest:
    """``path`` is absolute on the endpoint's host (it already holds the URL's prefix when wanted)."""
    head = {"Content-Type": "application/json"} if body is not None else {}
    return HttpRequest(method, f"{endpoint.origin}{path}", body, {**head, **(headers or {})})


def new_session(connections: int) -> aiohttp.ClientSession:
    """A session keeping up to ``connections`` connections alive; timeouts are the caller's."""
    connector = aiohttp.TCPConnector(limit=max(1, connections), force_close=False)
    reuse = aiohttp.TraceConfig()
    reuse.on_connection_reuseconn.append(_mark_reused)
    # no total timeout: each request is bounded by the load generator's own per-request timeout
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None), trace_configs=[reuse]
    )


async def _mark_reused(_session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: object) -> None:
    ctx.trace_request_ctx.reused = True


def classify(exc: BaseException) -> HttpClientError:
    """The error kind of an aiohttp failure."""
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionRefusedError):
        return HttpClientError("connection_refused", f"{exc.host}:{exc.port} refused the connection")
    if isinstance(exc, aiohttp.ClientResponseError | http_exceptions.HttpProcessingError):
        return HttpClientError("malformed_response", detail)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return HttpClientError("connection_error", f"connection closed in the middle of the body ({exc})")
    return HttpClientError("connection_error", detail)


# what a server's closing of an idle keep-alive connection looks like to the next request sent on it
STALE = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


@asynccontextmanager
async def send(session: aiohttp.ClientSession, req: HttpRequest) -> AsyncIterator[aiohttp.ClientResponse]:
    """The response to ``req`` with its body unread; failures raise :class:`HttpClientError`.

    A request that failed before any answer on a kept-alive connection the server had closed while
    idle (llama-server closes them between requests) is sent again, as every HTTP client does; one
    that fails on a new connection is not. The pool may hold several such connections at once (all of
    a level's users between two requests), and each is found closed only by using it."""
    while True:
        ctx = SimpleNamespace(reused=False)
        try:
            resp = await session.request(
                req.method, req.url, data=req.body, headers=req.headers, trace_request_ctx=ctx
            )
        except STALE as exc:
            if ctx.reused:
                continue  # aiohttp closed that one: once the idle ones are spent, the next is new
            raise classify(exc) from exc
        except (aiohttp.ClientError, http_exceptions.HttpProcessingError, OSError) as exc:
            raise classify(exc) from exc
        try:
            yield resp
        except (aiohttp.ClientError, http_exceptions.HttpProcessingError, OSError) as exc:
            raise classify(exc) from exc
        finally:
            resp.release()
        return


async def read_body(resp: aiohttp.ClientResponse, limit: int = 1 << 20) -> bytes:
    """The rest of the body; at most ``limit`` bytes are kept, the rest is read and dropped."""
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in resp.content.iter_any():
            if size < limit:
                parts.append(chunk)
                size += len(chunk)
    except (aiohttp.ClientError, http_exceptions.HttpProcessingError, OSError) as exc:
        raise classify(exc) from exc
    return b"".join(parts)[:limit]


async def simple_request(
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    timeout_s: float = 10.0,
    headers: dict[str, str] | None = None,
    limit: int = 1 << 20,
) -> tuple[int, bytes]:
    """One request on its own connection (for probes: /ping, /tokenize); returns status and body
    (its first ``limit`` bytes)."""
    ep = Endpoint.parse(url)
    parts = urlsplit(url if "://" in url else f"http://{url}")
    path = (ep.prefix or "/") + (f"?{parts.query}" if parts.query else "")
    req = prepare(ep, method, path, body, {**(headers or {}), "Connection": "close"})

    async def go() -> tuple[int, bytes]:
        async with new_session(1) as session, send(session, req) as resp:
            return resp.status, await read_body(resp, limit)

    return await asyncio.wait_for(go(), timeout_s)
