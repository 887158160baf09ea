"""The endpoint's internal key: copies listen on 127.0.0.1 ports any local user can reach, so each
endpoint makes a random key at start, gives it to its copies as their only API key (through the
environment, never argv: `ps` shows argv to every user) and sends it on every request it relays. A
local user who skips the router gets a 401 like any client without a key; clients' own keys still
stop at the router. The key is never logged nor shown by `repr`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import httpx

from llmhost.web.auth import ENV_KEYS

# the copy's `llmhost serve` reads its API keys from this variable; the router sends the key as
# x-api-key (a client's x-api-key and Authorization are dropped before relaying)
HEADER = "x-api-key"


@dataclass(frozen=True, slots=True)
class InternalKey:
    value: str = field(repr=False)

    @classmethod
    def generate(cls) -> InternalKey:
        return cls(secrets.token_urlsafe(32))

    def env(self) -> dict[str, str]:
        """What a copy's environment gets: this key, and only it, as its API keys."""
        return {ENV_KEYS: self.value}

    def attach(self, client: httpx.AsyncClient) -> None:
        """Every request `client` sends to a copy (relayed requests, /metrics scrapes) carries the key."""
        client.headers[HEADER] = self.value
