"""The API keys in use, read again from their file on SIGHUP without a restart.

A reload that fails (a file gone, an entry wrong) keeps the keys in use and logs why: a typo in the key
file must not lock every client out, nor let every client in. Quotas already spent stay spent: the
buckets belong to the key names (web/ratelimit.py), not to the file.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from llmhost.web.auth import ApiKeys

log = logging.getLogger("llmhost")


class KeyRing:
    """`keys`, plus `internal` (a key made in process for the server's own requests, kept on reload)."""

    def __init__(self, keys: ApiKeys, internal: str | None = None) -> None:
        self._loader = keys.loader
        self._internal = internal
        self.keys = self._with_internal(keys)

    @property
    def reloadable(self) -> bool:
        return self._loader is not None

    def reload(self) -> bool:
        """Read the keys again; False (logged, the keys in use kept) if they cannot be."""
        if self._loader is None:
            return False
        try:
            keys = self._loader()
        except (ValueError, OSError) as exc:
            log.error("API keys not reloaded, those in use are kept: %s", exc)
            return False
        if not keys.enabled:
            log.error("API keys not reloaded, those in use are kept: none left (authentication stays on)")
            return False
        self.keys = self._with_internal(keys)
        named = sum(1 for i in keys.identities if i.name)
        log.info("API keys reloaded: %d key(s), %d named", len(keys.digests), named)
        return True

    def _with_internal(self, keys: ApiKeys) -> ApiKeys:
        return keys.with_key(self._internal) if self._internal is not None else keys


def reload_on_hangup(ring: KeyRing) -> Callable[[], None]:
    """Reload `ring` on SIGHUP while the running loop lives; returns what stops it. Only the main
    thread's loop can take signals (not an app run in a test client's thread): there it does nothing."""
    if not ring.reloadable:
        return lambda: None
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGHUP, ring.reload)
    except (ValueError, RuntimeError, NotImplementedError) as exc:
        log.debug("SIGHUP does not reload the API keys here: %s", exc)
        return lambda: None

    def stop() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return stop
