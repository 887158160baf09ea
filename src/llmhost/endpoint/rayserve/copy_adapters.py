"""A Ray endpoint's LoRA adapters changed at run time, as its copies carry them out. No Ray here.

A Ray Serve handle picks one copy; it cannot reach each. So a component's adapters live in its
deployment's `user_config` (`{"adapters": [...]}`: every adapter its copies load, the file's included),
which Ray Serve hands every copy, in place, when the ingress changes it (`reconfigure`), and every copy
it starts later right after its constructor. The copy loads and unloads through its own server's
`POST /admin/adapters/load|unload`, in-process, and tells the ingress what it applied, what it refused
and its `GET /admin/adapters` rows (`AdapterReport`). A refusal never raises: Ray Serve would replace the
copy (and start the next one with the same config) instead of relaying why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llmhost.endpoint.adapters.rules import load_body
from llmhost.endpoint.adapters.spec import AdapterEntry

KEY = "adapters"  # the user_config's key


def user_config(entries: list[AdapterEntry]) -> dict[str, Any]:
    return {KEY: [e.model_dump() for e in entries]}


def entries_of(config: Any) -> tuple[AdapterEntry, ...] | None:
    """The adapters a user_config names; None: it names none (the file's hold)."""
    if not isinstance(config, dict) or not isinstance(config.get(KEY), list):
        return None
    return tuple(AdapterEntry.model_validate(e) for e in config[KEY])


@dataclass(frozen=True)
class Refusal:
    """A copy's answer refusing to load or unload adapter `name`, as its server gave it."""

    name: str
    status: int
    text: str
    retry_after: str | None = None


@dataclass(frozen=True)
class AdapterReport:
    """What a copy tells the ingress: the adapters of the config it applied last (None: none given
    yet, its file's), its refusals doing so, and its /admin/adapters rows."""

    applied: tuple[AdapterEntry, ...] | None
    refusals: tuple[Refusal, ...] = ()
    rows: tuple[dict[str, Any], ...] = ()


# the copy's own admin route: (action, body) → (status, answer text, Retry-After)
Post = Callable[[str, dict[str, Any]], Awaitable[tuple[int, str, str | None]]]


@dataclass
class CopyAdapters:
    """The adapters one copy has loaded (its file's at start), brought to each config Ray hands it."""

    post: Post
    loaded: dict[str, AdapterEntry] = field(default_factory=dict)
    applied: tuple[AdapterEntry, ...] | None = None
    refusals: tuple[Refusal, ...] = ()

    async def apply(self, config: Any) -> None:
        """Unload what the config no longer names (or names otherwise), then load what it adds."""
        wanted = entries_of(config)
        if wanted is None:
            return
        want = {e.name: e for e in wanted}
        refused: list[Refusal] = []
        for name, entry in list(self.loaded.items()):
            if want.get(name) != entry:
                status, text, retry = await self.post("unload", {"name": name})
                if status in (200, 404):  # 404: it had it no more
                    del self.loaded[name]
                else:
                    refused.append(Refusal(name, status, text, retry))
        for name, entry in want.items():
            if name not in self.loaded:
                status, text, retry = await self.post("load", load_body(entry))
                if status == 200:
                    self.loaded[name] = entry
                else:
                    refused.append(Refusal(name, status, text, retry))
        self.applied, self.refusals = wanted, tuple(refused)

    def report(self, rows: list[dict[str, Any]]) -> AdapterReport:
        return AdapterReport(self.applied, self.refusals, tuple(rows))
