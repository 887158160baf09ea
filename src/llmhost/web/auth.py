"""API keys, shared by the replica server and the endpoint router (with its admin API).

A request must carry one of the configured keys as `Authorization: Bearer KEY` or `x-api-key: KEY`;
the probes SageMaker and load balancers send without credentials (`/ping`, `/health`) stay open, and so
does the API's description (/openapi.json, /docs and its assets: no data of the server's), which a
browser opens without a key.
Keys are compared as SHA-256 digests with `hmac.compare_digest` against every configured key, so the
time taken says nothing about how much of a key matched, nor which key; they are never logged. A key
may have a name and quotas (web/keyfile.py), which web/quota.py applies.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from llmhost.web.asgi import request_id, send_error
from llmhost.web.errors import error_body
from llmhost.web.keyfile import UNNAMED, KeyEntry, KeyFileError, KeyIdentity, read_key_file

if TYPE_CHECKING:
    from llmhost.web.quota import Quotas

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
    """The accepted keys, kept only as digests, with who each is (`identities`, by position; missing
    ones are unnamed). Empty: authentication is off. `loader`: reads them again from where they came
    (SIGHUP, web/keyring.py); None: they cannot be reloaded."""

    digests: tuple[bytes, ...] = ()
    identities: tuple[KeyIdentity, ...] = ()
    loader: Callable[[], ApiKeys] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, keys: Iterable[str | KeyEntry]) -> ApiKeys:
        """A key given twice counts once, named if either was (a plain key that is also a named
        entry's must not escape that entry's quotas)."""
        found: dict[bytes, KeyIdentity] = {}
        for item in keys:
            entry = item if isinstance(item, KeyEntry) else KeyEntry(item)
            key = entry.key.strip()
            if not key:
                raise ValueError("an API key is empty")
            if any(c.isspace() for c in key):
                raise ValueError("an API key contains whitespace")
            identity = KeyIdentity(entry.name, entry.limits)
            digest = _digest(key)
            if found.get(digest, UNNAMED) == UNNAMED:
                found[digest] = identity
        return cls(tuple(found), tuple(found.values()))

    def with_key(self, key: str) -> ApiKeys:
        """These keys and `key` (a key made in process for the server's own requests, unnamed)."""
        identities = (*self.identities, *([UNNAMED] * (len(self.digests) - len(self.identities))), UNNAMED)
        return ApiKeys((*self.digests, _digest(key)), identities, self.loader)

    @property
    def enabled(self) -> bool:
        return bool(self.digests)

    @property
    def limited(self) -> bool:
        """Whether any key has a quota."""
        return any(i.limits.any for i in self.identities)

    def match(self, presented: str) -> KeyIdentity | None:
        """Who `presented` is, None if no key."""
        candidate = _digest(presented)
        found = 0
        for i, digest in enumerate(self.digests, start=1):  # every key compared: no early exit
            found = max(found, hmac.compare_digest(candidate, digest) * i)
        if not found:
            return None
        return self.identities[found - 1] if found <= len(self.identities) else UNNAMED

    def accepts(self, presented: str) -> bool:
        return self.match(presented) is not None


def load_keys(
    flags: list[str], file: Path | None, env: dict[str, str] | None = None, count_tokens: bool = True
) -> ApiKeys:
    """Keys from `--api-key` (repeatable), `--api-key-file` (web/keyfile.py: a key per line, or a YAML
    list of named keys with quotas) and $LLMHOST_API_KEYS and $LLMHOST_API_KEY (each comma-separated),
    all of them accepted. `count_tokens` False: a front that cannot count tokens (the endpoint router)
    refuses a tokens_per_minute rather than ignore it. The keys returned reload from the same places."""
    environ = env if env is not None else dict(os.environ)
    keys: list[str | KeyEntry] = list(flags)
    if file is not None:
        entries = read_key_file(file)
        if not count_tokens and any(e.limits.tokens_per_minute is not None for e in entries):
            raise KeyFileError(
                f"--api-key-file {file}: tokens_per_minute is counted by `llmhost serve`; an endpoint's "
                "router limits requests_per_minute only (see docs/guides/operations.md)"
            )
        keys += entries
    for raw in (environ.get(ENV_KEYS, ""), environ.get(ENV_KEY, "")):
        keys += [k for k in raw.split(",") if k.strip()]
    loaded = ApiKeys.of(keys)
    return ApiKeys(loaded.digests, loaded.identities, lambda: load_keys(flags, file, environ, count_tokens))


def presented_key(headers: dict[bytes, bytes]) -> str:
    """The key a request carries: `Authorization: Bearer KEY`, else `x-api-key`."""
    auth = headers.get(b"authorization", b"").decode("latin-1").strip()
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get(b"x-api-key", b"").decode("latin-1").strip()


class KeySource(Protocol):
    """Keys that may change while serving (web/keyring.py's KeyRing, reloaded on SIGHUP)."""

    @property
    def keys(self) -> ApiKeys: ...


class ApiKeyMiddleware:
    """401 JSON for a request without an accepted key, except on the open probe paths; `routes`: the
    app's, whose API's format the refusal takes. `keys`: fixed keys, or a ring whose keys change on
    SIGHUP; `quotas`: where a named key's requests and tokens are counted and limited (None: not)."""

    def __init__(
        self,
        app: ASGIApp,
        keys: ApiKeys | KeySource,
        open_paths: frozenset[str] = OPEN_PATHS,
        routes: Sequence[BaseRoute] = (),
        quotas: Quotas | None = None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.open_paths = open_paths
        self.routes = routes
        self.quotas = quotas

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(scope["path"], self.open_paths):
            await self.app(scope, receive, send)
            return
        key = presented_key(dict(scope.get("headers", [])))
        keys = self.keys if isinstance(self.keys, ApiKeys) else self.keys.keys
        identity = keys.match(key) if key else None
        if identity is not None and identity.name and self.quotas is not None:
            await self.quotas.serve(identity, self.app, scope, receive, send, self.routes)
            return
        if identity is not None:
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
