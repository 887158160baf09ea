"""A small HTTP reverse proxy on 127.0.0.1 in front of the moto server: it records every request that
passes (method, path, query, Range) and can misbehave as a network or a store would: cut the connection
in the middle of the first response to each ranged GET, or flip a byte of every GET body (or of the
next few). llmhost (in
this process or in a server process) is pointed at it like at any S3 endpoint."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: str
    range: str | None


@dataclass
class Faults:
    cut_first_range_get: bool = False  # the first GET of each Range: headers, half the body, then a cut
    cut_every_range_get: bool = False  # every ranged GET is cut
    flip_get_byte: bool = False  # every GET body arrives with its first byte changed
    flip_gets: int = 0  # the next this many GET bodies arrive with their first byte changed
    ranges_cut: set[str] = field(default_factory=set)


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[Seen] = []

    def add(self, seen: Seen) -> None:
        with self.lock:
            self.requests.append(seen)

    def object_gets(self, key_suffix: str = "") -> list[Seen]:
        """GETs of objects (ranged or not); listings are GETs of the bucket with a query."""
        with self.lock:
            return [
                r
                for r in self.requests
                if r.method == "GET"
                and "list-type" not in r.query
                and r.path.count("/") >= 2
                and r.path.endswith(key_suffix)
            ]

    def count(self, method: str, query_has: str = "") -> int:
        with self.lock:
            return sum(1 for r in self.requests if r.method == method and query_has in r.query)

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()


def _handler(upstream: str, recorder: Recorder, faults: Faults) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:  # quiet: the recorder keeps what matters
            return

        def _relay(self) -> None:
            parts = urlsplit(self.path)
            recorder.add(Seen(self.command, parts.path, parts.query, self.headers.get("Range")))
            length = int(self.headers.get("Content-Length", 0) or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            finally:
                conn.close()
            self._answer(resp, data)

        def _answer(self, resp: http.client.HTTPResponse, data: bytes) -> None:
            rng = self.headers.get("Range")
            cut = (
                self.command == "GET"
                and rng is not None
                and resp.status == 206
                and (
                    faults.cut_every_range_get
                    or (faults.cut_first_range_get and rng not in faults.ranges_cut)
                )
            )
            flip = faults.flip_get_byte or faults.flip_gets > 0
            if self.command == "GET" and flip and data and resp.status < 300:
                faults.flip_gets = max(0, faults.flip_gets - 1)
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            self.send_response(resp.status)
            head = self.command == "HEAD"  # its Content-Length is the object's: passed through
            for k, v in resp.getheaders():
                if k.lower() not in _HOP and (head or k.lower() != "content-length"):
                    self.send_header(k, v)
            if not head:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if head:
                return
            if cut:
                faults.ranges_cut.add(rng or "")
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True  # the client sees a body shorter than announced
                return
            self.wfile.write(data)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _relay

    return Handler


@dataclass
class Proxy:
    url: str
    recorder: Recorder
    faults: Faults


@contextmanager
def s3_proxy(upstream: str, faults: Faults | None = None) -> Iterator[Proxy]:
    recorder, faults = Recorder(), faults or Faults()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, recorder, faults))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="s3 proxy", daemon=True)
    thread.start()
    try:
        yield Proxy(f"http://127.0.0.1:{server.server_address[1]}", recorder, faults)
    finally:
        server.shutdown()
        server.server_close()
