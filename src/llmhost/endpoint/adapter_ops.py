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

from llmhost.endpoint.adapter_spec import AdapterEntry, as_entry
from llmhost.endpoint.component import Component
from llmhost.endpoint.control_errors import (
    ComponentExistsError,
    ComponentInUseError,
    CopyRefusal,
    UnknownComponentError,
)
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
        """The component whose copies load the adapter `name`."""
        return next((c for c in self.components.values() if name in c.adapter_entries), None)

    def adapter_components(self) -> list[tuple[str, str]]:
        """(adapter component, its base), in order."""
        return [(name, c.name) for c in self.components.values() for name in c.adapter_components()]

    def check_new(self, name: str, base: str, bases: frozenset[str] = frozenset()) -> None:
        """A new adapter `name` on `base` (a component now, or among `bases` being added with it)."""
        if name in self.components or name in bases:
            raise ComponentExistsError(f"component {name!r} already exists")
        taken = self.owner(name)
        if taken is not None:
            raise ComponentExistsError(f"{name!r} is already an adapter of component {taken.name!r}")
        if base not in bases:
            self.base(base)

    def base(self, name: str) -> Component:
        comp = self.components.get(name)
        if comp is None or comp.removing:
            known = ", ".join(sorted(self.components)) or "(none)"
            what = "an adapter component, not a base" if self.owner(name) is not None else "unknown"
            raise UnknownComponentError(f"base inference component {name!r}: {what}; components: {known}")
        if comp.spec.embeddings:
            raise ValueError(f"component {name!r} serves embeddings: LoRA adapters apply to text generation")
        return comp

    # --- adapter components -----------------------------------------------------------------------

    def check_components(self, specs: list[ComponentSpec]) -> None:
        """The adapter components among `specs` can be added (their bases exist or come with them)."""
        bases = frozenset(s.name for s in specs if s.base is None)
        for s in specs:
            if s.base is not None:
                if s.base not in bases and s.base in {x.name for x in specs}:
                    raise ValueError(f"adapter component {s.name!r}: its base {s.base!r} is one too")
                self.check_new(s.name, s.base, bases)

    async def add_components(self, specs: list[ComponentSpec]) -> None:
        for s in specs:
            if s.base is not None:
                await self.load(self.base(s.base), as_entry(s), field="adapter.")

    async def removed(self, name: str) -> bool:
        """Delete adapter component `name` (True), or nothing (False) when `name` is a component; a
        component with adapter components is refused naming them, as SageMaker refuses it."""
        comp = self.components.get(name)
        if comp is not None:
            users = comp.adapter_components()
            if users:
                raise ComponentInUseError(f"component {name!r} is the base of adapter component(s) "
                                          f"{', '.join(users)}: delete them first")  # fmt: skip
            return False
        owner = self.owner(name)
        if owner is None or name not in owner.adapter_components():
            return False  # unknown: the manager says so
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
        entry = comp.adapter_entries.get(name)
        if entry is None:
            raise UnknownComponentError(f"component {comp.name!r} has no adapter {name!r}; its adapters: "
                                        f"{', '.join(comp.adapter_entries) or '(none)'}")  # fmt: skip
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
        rows: dict[str, dict[str, Any]] = {
            a.name: {**comp.adapter_state(a), "component": comp.name, "copies": 0, "requests": 0}
            for a in comp.adapter_list()
        }
        answers = await asyncio.gather(*(self._get(r) for r in comp.ready()))
        for answer in answers:
            for item in answer:
                row = rows.get(str(item.get("name")))
                if row is not None:
                    row["copies"] += 1
                    row["requests"] += int(item.get("requests", 0))
        return list(rows.values())

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
    try:
        error = answer.json()["error"]
        message, param = str(error["message"]), error.get("param")
    except (ValueError, KeyError, TypeError):
        message, param = answer.text[:500], None
    field = f"{prefix}{param}" if param else None
    return CopyRefusal(answer.status_code, f"copy {replica.id}: {message}", field,
                       answer.headers.get("retry-after"))  # fmt: skip
