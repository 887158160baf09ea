"""A minimal HTTP/1.1 keep-alive client for streamed responses.

The load generator must never be the bottleneck, so the hot path avoids a general HTTP library: one
connection is one asyncio stream, a request is one pre-encoded ``bytes`` write, and the response body
is handed to the caller chunk by chunk as it arrives (chunked transfer, Content-Length or
read-until-close). Only what a benchmark needs is implemented: no redirects, no compression, no
proxies.

Why not a library: ``benchmarks/http_client_rate.py`` measured it against aiohttp 3.14 and httpx 0.28
doing the same work (16 SSE token events per answer, concurrency 64, fake server and client pinned to
separate cores; shared 2-core machine, 1-minute load average 3.9; figures in
``benchmarks/results/http_client_rate.json``): this client 6,078 streamed req/s at 163 µs of client
CPU per request, aiohttp 4,519 req/s at 220 µs (26% fewer requests/s, 35% more CPU per request),
httpx 207 req/s at 4.8 ms. aiohttp reaches the ≥ 1,000 req/s target but is not within 10% of this
client, so this one is kept; httpx cannot reach the target. Rerun the benchmark when either changes.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

READ_LIMIT = 1 << 22  # longest line / chunk header accepted (4 MiB)


class HttpClientError(Exception):
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
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.prefix}"


def encode_request(
    endpoint: Endpoint, method: str, path: str, body: bytes | None, headers: dict[str, str] | None = None
) -> bytes:
    """Encode a whole HTTP/1.1 request (head and body) once, so sending it is a single write."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {endpoint.host_header}"]
    if body is not None:
        lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(body)}")
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


class Response:
    """Status and headers of a response whose body is read with :meth:`read_chunk`."""

    __slots__ = ("_chunked", "_conn", "_done", "_remaining", "headers", "keep_alive", "status")

    def __init__(self, conn: Connection, status: int, headers: dict[str, str]) -> None:
        self._conn = conn
        self.status = status
        self.headers = headers
        te = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        length = headers.get("content-length")
        self._remaining: int | None = None
        if not self._chunked and length is not None:
            try:
                self._remaining = int(length)
            except ValueError as exc:
                raise HttpClientError("malformed_response", f"bad Content-Length {length!r}") from exc
        self.keep_alive = headers.get("connection", "").lower() != "close" and (
            self._chunked or self._remaining is not None
        )
        self._done = self._remaining == 0

    async def read_chunk(self) -> bytes | None:
        """The next piece of the body as it arrived, or ``None`` once the body is complete."""
        if self._done:
            return None
        reader = self._conn.reader
        assert reader is not None
        try:
            if self._chunked:
                line = await reader.readuntil(b"\r\n")
                size_text = line[:-2].split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError as exc:
                    raise HttpClientError("malformed_response", f"bad chunk size {size_text!r}") from exc
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                        pass
                    self._done = True
                    return None
                data = await reader.readexactly(size + 2)
                return data[:-2]
            if self._remaining is not None:
                data = await reader.read(min(self._remaining, 1 << 16))
                if not data:
                    raise asyncio.IncompleteReadError(b"", self._remaining)
                self._remaining -= len(data)
                if self._remaining <= 0:
                    self._done = True
                return data
            data = await reader.read(1 << 16)
            if not data:
                self._done = True
                return None
            return data
        except asyncio.IncompleteReadError as exc:
            self._conn.close()
            raise HttpClientError("connection_error", "connection closed in the middle of the body") from exc
        except asyncio.LimitOverrunError as exc:
            self._conn.close()
            raise HttpClientError("malformed_response", "chunk header too long") from exc
        except (ConnectionError, OSError) as exc:
            self._conn.close()
            raise HttpClientError("connection_error", f"{type(exc).__name__}: {exc}") from exc

    async def read_all(self, limit: int = 1 << 20) -> bytes:
        """The rest of the body (at most ``limit`` bytes are kept)."""
        parts: list[bytes] = []
        size = 0
        while (chunk := await self.read_chunk()) is not None:
            if size < limit:
                parts.append(chunk)
                size += len(chunk)
        return b"".join(parts)[:limit]

    @property
    def complete(self) -> bool:
        return self._done


class Connection:
    """One keep-alive connection; requests on it are sequential."""

    __slots__ = ("endpoint", "reader", "requests_sent", "writer")

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.requests_sent = 0

    @property
    def is_open(self) -> bool:
        return self.writer is not None and not self.writer.is_closing()

    async def open(self) -> None:
        ep = self.endpoint
        ssl_ctx = ssl.create_default_context() if ep.scheme == "https" else None
        try:
            self.reader, self.writer = await asyncio.open_connection(
                ep.host, ep.port, limit=READ_LIMIT, ssl=ssl_ctx
            )
        except ConnectionRefusedError as exc:
            raise HttpClientError(
                "connection_refused", f"{ep.host}:{ep.port} refused the connection"
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise HttpClientError("connection_error", f"{type(exc).__name__}: {exc}") from exc
        self.requests_sent = 0

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = None
        self.writer = None

    async def request(self, data: bytes) -> Response:
        """Send an encoded request and read the response head.

        A keep-alive connection that the server closed while idle is reopened and the request sent
        once more, which is what every HTTP client does.
        """
        for attempt in (0, 1):
            reused = self.is_open and self.requests_sent > 0
            if not self.is_open:
                await self.open()
            assert self.reader is not None and self.writer is not None
            try:
                self.writer.write(data)
                self.requests_sent += 1
                head = await self.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                self.close()
                if reused and attempt == 0 and not exc.partial:
                    continue
                raise HttpClientError("connection_error", "connection closed before the response") from exc
            except asyncio.LimitOverrunError as exc:
                self.close()
                raise HttpClientError("malformed_response", "response head too long") from exc
            except (ConnectionError, OSError) as exc:
                self.close()
                if reused and attempt == 0:
                    continue
                raise HttpClientError("connection_error", f"{type(exc).__name__}: {exc}") from exc
            return self._parse_head(head)
        raise AssertionError("unreachable")

    def _parse_head(self, head: bytes) -> Response:
        lines = head.decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/"):
            self.close()
            raise HttpClientError("malformed_response", f"bad status line {lines[0][:80]!r}")
        try:
            status = int(status_line[1])
        except ValueError as exc:
            self.close()
            raise HttpClientError("malformed_response", f"bad status line {lines[0][:80]!r}") from exc
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status_line[0] == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
            headers["connection"] = "close"
        return Response(self, status, headers)

    def release(self, response: Response) -> None:
        """Call after the body was read: keeps the connection when it can be reused."""
        if not (response.complete and response.keep_alive):
            self.close()


async def simple_request(
    url: str, method: str = "GET", body: bytes | None = None, timeout_s: float = 10.0
) -> tuple[int, bytes]:
    """One request on a fresh connection (for probes: /ping, /tokenize); returns status and body."""
    ep = Endpoint.parse(url)
    path = ep.prefix or "/"
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.query:
        path = f"{path}?{parts.query}"
    conn = Connection(Endpoint(ep.scheme, ep.host, ep.port, ""))

    async def go() -> tuple[int, bytes]:
        try:
            resp = await conn.request(encode_request(ep, method, path, body, {"Connection": "close"}))
            return resp.status, await resp.read_all()
        finally:
            conn.close()

    return await asyncio.wait_for(go(), timeout_s)
