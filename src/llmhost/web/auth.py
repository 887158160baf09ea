"""API keys, shared by the replica server and the endpoint router (with its admin API).

A request must carry one of the configured keys as `Authorization: Bearer KEY` or `x-api-key: KEY`;
the probes SageMaker and load balancers send without credentials (`/ping`, `/health`) stay open, and so
does the API's description (/openapi.json, /docs and its assets: no data of the server's), which a
browser opens without a key.
Keys are compared as SHA-256 digests with `hmac.compare_digest` against every configured key, so the
time taken says nothing about how much of a key matched, nor which key; they are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from llmhost.web.asgi import request_id, send_error
from llmhost.web.errors import error_body

log = logging.getLogger("llmhost")

ENV_KEYS = "LLMHOST_API_KEYS"
# the admin client's variable (`llmhost endpoint status` sends it): a server reads it too, so one
# variable set in a shell serves both sides, whichever of the two names it is
ENV_KEY = "LLMHOST_API_KEY"
ENV_KEY_VARS = (ENV_KEYS, ENV_KEY)
OPEN_PATHS = frozenset({"/ping", "/health"})
DOC_PATHS = frozenset({"/openapi.json", "/docs"})
DOC_ASSETS = "/docs/static/"


def is_open(path: str, open_paths: frozenset[str] = OPEN_PATHS) -> bool:
    """Whether `path` is answered without a key."""
    return path in open_paths or path in DOC_PATHS or path.startswith(DOC_ASSETS)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True, slots=True)
class ApiKeys:
    """The accepted keys, kept only as digests. Empty: authentication is off."""

    digests: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, keys: Iterable[str]) -> ApiKeys:
        cleaned = [k.strip() for k in keys]
        if any(not k for k in cleaned):
            raise ValueError("an API key is empty")
        if any(any(c.isspace() for c in k) for k in cleaned):
            raise ValueError("an API key contains whitespace")
        return cls(tuple(_digest(k) for k in cleaned))

    def with_key(self, key: str) -> ApiKeys:
        """These keys and `key` (a key made in process for the server's own requests)."""
        return ApiKeys((*self.digests, _digest(key)))

    @property
    def enabled(self) -> bool:
        return bool(self.digests)

    def accepts(self, presented: str) -> bool:
        candidate = _digest(presented)
        found = False
        for digest in self.digests:  # every key compared: no early exit
            found |= hmac.compare_digest(candidate, digest)
        return found


def load_keys(flags: list[str], file: Path | None, env: dict[str, str] | None = None) -> ApiKeys:
    """Keys from `--api-key` (repeatable), `--api-key-file` (one per line, `#` comments) and
    $LLMHOST_API_KEYS and $LLMHOST_API_KEY (each comma-separated), all of them accepted."""
    keys = list(flags)
    if file is not None:
        for line in file.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                keys.append(line)
    environ = env if env is not None else dict(os.environ)
    for raw in (environ.get(ENV_KEYS, ""), environ.get(ENV_KEY, "")):
        keys += [k for k in raw.split(",") if k.strip()]
    return ApiKeys.of(keys)


def presented_key(headers: dict[bytes, bytes]) -> str:
    """The key a request carries: `Authorization: Bearer KEY`, else `x-api-key`."""
    auth = headers.get(b"authorization", b"").decode("latin-1").strip()
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get(b"x-api-key", b"").decode("latin-1").strip()


class ApiKeyMiddleware:
    """401 JSON for a request without an accepted key, except on the open probe paths; `routes`: the
    app's, whose API's format the refusal takes."""

    def __init__(
        self,
        app: ASGIApp,
        keys: ApiKeys,
        open_paths: frozenset[str] = OPEN_PATHS,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.app = app
        self.keys = keys
        self.open_paths = open_paths
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(scope["path"], self.open_paths):
            await self.app(scope, receive, send)
            return
        key = presented_key(dict(scope.get("headers", [])))
        if key and self.keys.accepts(key):
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        log.info(
            "request %s (%s %s) refused: %s API key",
            rid,
            scope.get("method"),
            scope.get("path"),
            "an unknown" if key else "no",
        )
        message = "invalid API key" if key else "an API key is required (Authorization: Bearer, or x-api-key)"
        body = error_body(401, message, "authentication_error", request_id=rid)
        challenge = (b"www-authenticate", b'Bearer realm="llmhost"')
        await send_error(send, scope, self.routes, 401, body, [challenge])
