"""LoRA adapters on a running endpoint: adapter components added and deleted, adapters loaded and unloaded
on a component's copies (each copy's `POST /admin/adapters/load|unload`, with the endpoint's internal
key), and a copy that becomes ready brought up to date.

A component's adapter list (`Component.adapter_entries`) is the one truth: a copy started later (scale
up, a restart after a crash) starts with it (`--lora`), and one that started before a change gets the
change once it is ready. A change a copy refuses is taken back from the copies that took it, and the
copy's refusal is relayed (its status, message and field).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import httpx

from llmhost.endpoint.adapter_rules import (
    base_of,
    check_components,
    check_new,
    copy_refusal,
    listing_rows,
    owner,
    removal,
    unloadable,
)
from llmhost.endpoint.adapter_spec import AdapterEntry, as_entry
from llmhost.endpoint.component import Component
from llmhost.endpoint.control_errors import CopyRefusal
from llmhost.endpoint.internal import HEADER, InternalKey
from llmhost.endpoint.replica import Replica
from llmhost.endpoint.spec import ComponentSpec

log = logging.getLogger("llmhost.endpoint")
# a load may download an s3:// or hf:// adapter first
LOAD_TIMEOUT_S = 600.0


class AdapterOps:
    def __init__(self, components: dict[str, Component], key: InternalKey,
                 spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:  # fmt: skip
        self.components = components
        self.key = key
        self.spawn = spawn

    # --- views ------------------------------------------------------------------------------------

    def owner(self, name: str) -> Component | None:
        return owner(self.components, name)

    def adapter_components(self) -> list[tuple[str, str]]:
        """(adapter component, its base), in order."""
        return [(name, c.name) for c in self.components.values() for name in c.adapter_components()]

    def check_new(self, name: str, base: str, bases: frozenset[str] = frozenset()) -> None:
        check_new(self.components, name, base, bases)

    def base(self, name: str) -> Component:
        return base_of(self.components, name)

    # --- adapter components -----------------------------------------------------------------------

    def check_components(self, specs: list[ComponentSpec]) -> None:
        check_components(self.components, specs)

    async def add_components(self, specs: list[ComponentSpec]) -> None:
        for s in specs:
            if s.base is not None:
                await self.load(self.base(s.base), as_entry(s), field="adapter.")

    async def removed(self, name: str) -> bool:
        """Delete adapter component `name` (True), or nothing (False) when `name` is a component; a
        component with adapter components is refused naming them, as SageMaker refuses it."""
        owner = removal(self.components, name)
        if owner is None:
            return False  # a component, or unknown: the manager says so
        await self.unload(owner, name)
        return True

    # --- load and unload on the copies ------------------------------------------------------------

    async def load(self, comp: Component, entry: AdapterEntry, field: str = "") -> None:
        """Load `entry` on every ready copy of `comp` (one a copy refuses is taken back from all)."""
        async with comp.lock:  # no copy starts meanwhile: each started later loads it with `--lora`
            self.check_new(entry.name, comp.name)
            comp.adapter_entries[entry.name] = entry
            done: list[Replica] = []
            for r in comp.ready():
                answer = await self._call(r, "load", {"name": entry.name, "path": entry.path,
                                                      "scale": entry.scale})  # fmt: skip
                if answer.status_code != 200:
                    comp.adapter_entries.pop(entry.name, None)
                    await asyncio.gather(*(self._call(d, "unload", {"name": entry.name}) for d in done))
                    raise refusal(r, answer, field)
                r.loaded_adapters.add(entry.name)
                done.append(r)
        log.info("adapter %s loaded on %d copies of %s", entry.name, len(done), comp.name)

    async def unload(self, comp: Component, name: str) -> None:
        """Unload adapter `name` from every copy of `comp`: a 409 (with Retry-After) while requests use
        it on any copy, and then it stays everywhere."""
        entry = unloadable(comp, name)
        comp.adapter_entries.pop(name)  # routed nowhere from now on, and no copy starts with it
        done: list[Replica] = []
        for r in comp.ready():
            answer = await self._call(r, "unload", {"name": name})
            if answer.status_code not in (200, 404):  # 404: that copy had it no more
                comp.adapter_entries[name] = entry
                body = {"name": name, "path": entry.path, "scale": entry.scale}
                await asyncio.gather(*(self._call(d, "load", body) for d in done))
                raise refusal(r, answer, "")
            r.loaded_adapters.discard(name)
            done.append(r)
        log.info("adapter %s unloaded from %d copies of %s", name, len(done), comp.name)

    async def listing(self, comp: Component) -> list[dict[str, Any]]:
        """Each adapter of `comp`, with the ready copies that have it loaded and the requests using it."""
        answers = await asyncio.gather(*(self._get(r) for r in comp.ready()))
        return listing_rows(comp.name, comp.adapter_list(), answers)

    def catch_up(self, comp: Component, replica: Replica) -> None:
        """A copy became ready: load what was added since it started, unload what was removed."""
        wanted = set(comp.adapter_entries)
        if wanted != replica.loaded_adapters:
            self.spawn(self._catch_up(comp, replica))

    async def _catch_up(self, comp: Component, replica: Replica) -> None:
        for name in replica.loaded_adapters - set(comp.adapter_entries):
            if (await self._call(replica, "unload", {"name": name})).status_code in (200, 404):
                replica.loaded_adapters.discard(name)
        for name, e in list(comp.adapter_entries.items()):
            if name not in replica.loaded_adapters:
                answer = await self._call(replica, "load", {"name": name, "path": e.path, "scale": e.scale})
                if answer.status_code == 200:
                    replica.loaded_adapters.add(name)
                else:
                    log.warning("copy %s could not load adapter %s: %s", replica.id, name, answer.text[:300])

    # --- HTTP -------------------------------------------------------------------------------------

    async def _call(self, replica: Replica, action: str, body: dict[str, Any]) -> httpx.Response:
        async with httpx.AsyncClient(headers={HEADER: self.key.value}, timeout=LOAD_TIMEOUT_S) as client:
            try:
                return await client.post(f"{replica.url}/admin/adapters/{action}", json=body)
            except httpx.HTTPError as exc:
                return httpx.Response(502, json={"error": {"message": f"copy unreachable: {exc}"}})

    async def _get(self, replica: Replica) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(headers={HEADER: self.key.value}, timeout=30) as client:
            try:
                data = (await client.get(f"{replica.url}/admin/adapters")).json().get("data", [])
            except (httpx.HTTPError, ValueError, AttributeError):
                return []
        return [d for d in data if isinstance(d, dict)]


def refusal(replica: Replica, answer: httpx.Response, prefix: str) -> CopyRefusal:
    """A copy's refusal, relayed: its status, its message (naming the copy), its field under `prefix`."""
    retry_after = answer.headers.get("retry-after")
    return copy_refusal(replica.id, answer.status_code, answer.text, retry_after, prefix)
