"""A small Hugging Face Hub stand-in on 127.0.0.1 for the hf:// tests: the routes huggingface_hub calls to
list a repository and download a file, answered as the Hub answers them.

- `GET /api/models/OWNER/REPO[/revision/REV]` (`?blobs=true`): the model info, `sha` (the commit) and
  `siblings` (with `size` and `lfs.sha256` when blobs are asked for);
- `HEAD|GET /OWNER/REPO/resolve/REV/PATH`: a `.gguf` is an LFS file: 302 to the CDN with `X-Repo-Commit`,
  `X-Linked-Etag` (its sha256), `X-Linked-Size` and `ETag`; another file is served here (200, `ETag`);
- the CDN, on a port of its own (another origin: the client drops its token there, as it does for the
  Hub's CDN), serves `/cdn/SHA256` with `Range` (206, `Content-Range`);
- errors as the Hub's: 404 `X-Error-Code: RepoNotFound` / `RevisionNotFound` / `EntryNotFound`, 401
  `GatedRepo` for a gated repository's files without an accepted token.

Faults: `cut_once` names files whose next CDN GET sends its headers and half the body, then closes;
`corrupt_once` names files whose next CDN GET arrives whole with one byte changed (its middle byte), and
`corrupt_always` files whose every CDN GET does.
Every request is recorded (method, path, Range, whether a token came).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_CDN = re.compile(r"^/cdn/(?P<sha>[0-9a-f]{64})$")


@dataclass
class HubFile:
    path: Path  # its bytes, read from disk when served (the default model is 253 MB)
    sha256: str
    size: int

    @classmethod
    def of(cls, path: Path) -> HubFile:
        h = hashlib.sha256()
        with path.open("rb") as f:
            while block := f.read(1 << 22):
                h.update(block)
        return cls(path, h.hexdigest(), path.stat().st_size)


@dataclass
class HubRepo:
    files: dict[str, HubFile] = field(default_factory=dict)
    gated: bool = False
    advertised_size: dict[str, int] = field(default_factory=dict)  # a listing that lies about a size

    @property
    def commit(self) -> str:
        h = hashlib.sha1()
        for name in sorted(self.files):
            h.update(f"{name}\0{self.files[name].sha256}\n".encode())
        return h.hexdigest()

    def size(self, name: str) -> int:
        return self.advertised_size.get(name, self.files[name].size)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str | None
    token: bool


@dataclass
class Hub:
    url: str = ""
    cdn_url: str = ""
    repos: dict[str, HubRepo] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)  # tokens that were granted the gated repositories
    cut_once: set[str] = field(default_factory=set)  # file names whose next CDN GET is cut mid-body
    corrupt_once: set[str] = field(default_factory=set)  # file names whose next CDN GET has a byte changed
    corrupt_always: set[str] = field(default_factory=set)  # file names whose every CDN GET has one changed
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo: str, files: dict[str, Path], gated: bool = False) -> HubRepo:
        entry = HubRepo({name: HubFile.of(p) for name, p in files.items()}, gated)
        self.repos[repo] = entry
        return entry

    def blob(self, sha: str) -> HubFile | None:
        return next((f for r in self.repos.values() for f in r.files.values() if f.sha256 == sha), None)

    def name_of(self, sha: str) -> str | None:
        return next((n for r in self.repos.values() for n, f in r.files.items() if f.sha256 == sha), None)

    def gets(self, suffix: str = "") -> list[Seen]:
        """CDN GETs (file bodies)."""
        with self.lock:
            return [
                s
                for s in self.seen
                if s.method == "GET" and s.path.startswith("/cdn/") and s.path.endswith(suffix)
            ]

    def record(self, seen: Seen) -> None:
        with self.lock:
            self.seen.append(seen)


def _info(repo_id: str, repo: HubRepo, blobs: bool) -> dict[str, object]:
    siblings: list[dict[str, object]] = []
    for name, f in sorted(repo.files.items()):
        entry: dict[str, object] = {"rfilename": name}
        if blobs:
            entry["size"] = repo.size(name)
            entry["blobId"] = hashlib.sha1(f.sha256.encode()).hexdigest()
            if name.endswith(".gguf"):
                entry["lfs"] = {"size": repo.size(name), "sha256": f.sha256, "pointerSize": 135}
        siblings.append(entry)
    return {
        "_id": repo_id,
        "id": repo_id,
        "modelId": repo_id,
        "sha": repo.commit,
        "private": False,
        "gated": "manual" if repo.gated else False,
        "disabled": False,
        "tags": ["gguf"],
        "library_name": "gguf",
        "siblings": siblings,
    }


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:  # quiet: `hub.seen` keeps what matters
            return

        def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            if commit:
                self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, data: object) -> None:
            body = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _route(self) -> None:
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            hub.record(Seen(self.command, path, self.headers.get("Range"), bool(token)))
            if path == "/ping":
                return self._json({"ok": True})
            if m := _API.match(path):
                return self._api(m["repo"], m["rev"] or "main", "blobs" in parse_qs(parts.query))
            if m := _RESOLVE.match(path):
                return self._resolve(m["repo"], m["rev"], m["path"], token)
            if m := _CDN.match(path):
                return self._cdn(m["sha"])
            return self._error(404, "NotFound", f"no route {path}")

        def _repo(self, repo_id: str, rev: str) -> HubRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
            elif rev not in ("main", repo.commit):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return None
            return repo

        def _api(self, repo_id: str, rev: str, blobs: bool) -> None:
            if (repo := self._repo(repo_id, rev)) is not None:
                self._json(_info(repo_id, repo, blobs))

        def _resolve(self, repo_id: str, rev: str, name: str, token: str) -> None:
            if (repo := self._repo(repo_id, rev)) is None:
                return
            if repo.gated and token not in hub.tokens:
                message = f"Access to model {repo_id} is restricted: you must have access to it and log in."
                return self._error(401, "GatedRepo", message)
            f = repo.files.get(name)
            if f is None:
                return self._error(404, "EntryNotFound", f'{name} does not exist on "main"', repo.commit)
            if not name.endswith(".gguf"):  # a small file: served from the hub itself
                return self._body(f, 200, f'"{hashlib.sha1(f.sha256.encode()).hexdigest()}"', repo.commit)
            self.send_response(302)
            self.send_header("Location", f"{hub.cdn_url}/cdn/{f.sha256}")
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("X-Linked-Etag", f'"{f.sha256}"')
            self.send_header("X-Linked-Size", str(repo.size(name)))
            self.send_header("ETag", f'"{hashlib.sha1(f.sha256.encode()).hexdigest()}"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _cdn(self, sha: str) -> None:
            f = hub.blob(sha)
            if f is None:
                return self._error(404, "NotFound", "no such blob")
            self._body(f, 200, f'"{f.sha256}"', None)

        def _body(self, f: HubFile, status: int, etag: str, commit: str | None) -> None:
            start, end = 0, f.size - 1
            rng = self.headers.get("Range")
            if rng and (m := re.match(r"bytes=(\d+)-(\d*)$", rng)):
                start, end = int(m[1]), int(m[2]) if m[2] else f.size - 1
                status = 206
            self.send_response(status)
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            if commit:
                self.send_header("X-Repo-Commit", commit)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            if self.command == "HEAD":
                return
            self._send(f, start, end - start + 1)

        def _send(self, f: HubFile, start: int, length: int) -> None:
            name = hub.name_of(f.sha256) or ""
            with hub.lock:
                cut = name in hub.cut_once
                hub.cut_once.discard(name)
                corrupt = name in hub.corrupt_once or name in hub.corrupt_always
                hub.corrupt_once.discard(name)
            with f.path.open("rb") as src:
                src.seek(start)
                if cut:  # half the body, then the connection closes: the client sees it short
                    self.wfile.write(src.read(length // 2))
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if corrupt:  # the whole length, the middle byte of the file changed
                    body = bytearray(src.read(length))
                    if start <= f.size // 2 < start + length:
                        body[f.size // 2 - start] ^= 0xFF
                    self.wfile.write(body)
                    return
                shutil.copyfileobj(src, self.wfile, length=1 << 20)

        do_GET = do_HEAD = _route

    return Handler


def _serve(hub: Hub, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(hub))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="hub stand-in", daemon=True).start()
    return server


@contextmanager
def hub_server(hub: Hub | None = None, port: int = 0) -> Iterator[Hub]:
    """The hub and its CDN, each on a port of its own; stopped on exit (a later start may reuse `port`)."""
    hub = hub or Hub()
    api, cdn = _serve(hub, port), _serve(hub, 0)
    hub.url = f"http://127.0.0.1:{api.server_address[1]}"
    hub.cdn_url = f"http://127.0.0.1:{cdn.server_address[1]}"
    try:
        yield hub
    finally:
        for server in (api, cdn):
            server.shutdown()
            server.server_close()
