"""LoRA adapters on a running endpoint: adapter components added and deleted, adapters loaded and unloaded
on a component's copies (each copy's `POST /admin/adapters/load|unload`, with the endpoint's internal
key), and a copy that becomes ready brought up to date.

A component's adapter list (`Component.adapter_entries`) is the one truth: a copy started later (scale
up, a restart after a crash) starts with it (`--lora`), and one that started before a change gets the
change once it is ready (kept out of routing until then). An adapter is checked against its base's
model before any copy sees it (`adapter_check`). A change a copy refuses is taken back from the copies
that took it, and the copy's refusal is relayed (its status, message and field); a copy that refuses an
adapter after it was accepted (catching up, starting, loading it back) marks it failed with its reason
(`adapter_rules.AdapterHealth`), and no copy starts with it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import httpx

from llmhost.endpoint.adapters.check import fit_refusal
from llmhost.endpoint.adapters.rules import (
    base_of,
    check_components,
    check_new,
    copy_refusal,
    listing_rows,
    load_body,
    owner,
    removal,
    unloadable,
)
from llmhost.endpoint.adapters.spec import AdapterEntry, as_entry
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.replica import Replica, ReplicaState
from llmhost.endpoint.control_errors import ComponentExistsError, CopyRefusal
from llmhost.endpoint.internal import HEADER, InternalKey
from llmhost.endpoint.spec import ComponentSpec

log = logging.getLogger("llmhost.endpoint")
# a load may download an s3:// or hf:// adapter first
LOAD_TIMEOUT_S = 600.0


class AdapterOps:
    def __init__(
        self,
        components: dict[str, Component],
        key: InternalKey,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
    ) -> None:
        self.components = components
        self.key = key
        self.spawn = spawn
        self.pending: set[str] = set()  # adapters being loaded, not yet routed to

    # --- views ------------------------------------------------------------------------------------

    def owner(self, name: str) -> Component | None:
        return owner(self.components, name)

    def adapter_components(self) -> list[tuple[str, str]]:
        """(adapter component, its base), in order."""
        return [(name, c.name) for c in self.components.values() for name in c.adapter_components()]

    def check_new(self, name: str, base: str, bases: frozenset[str] = frozenset()) -> None:
        """A new adapter `name` on `base` (a component now, or among `bases` being added with it), not
        one being loaded now."""
        check_new(self.components, name, base, bases)
        if name in self.pending:
            raise ComponentExistsError(f"an adapter {name!r} is being loaded")

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
        """Check `entry` against the base's model (`adapter_check`, whether or not a copy runs), then load
        it on every ready copy of `comp`; one a copy refuses is taken back from all. Requests can name it
        once every copy has it; a copy starting meanwhile catches up once ready."""
        self.check_new(entry.name, comp.name)
        gguf = comp.model.gguf
        refused = await asyncio.to_thread(fit_refusal, entry.name, entry.path, gguf, f"{field}path")
        if refused is not None:
            raise refused
        async with comp.adapter_lock:
            self.check_new(entry.name, comp.name)
            self.pending.add(entry.name)
            try:
                done = await self._load_on(comp.ready(), entry, field)
            finally:
                self.pending.discard(entry.name)
            comp.adapter_entries[entry.name] = entry
        log.info("adapter %s loaded on %d copies of %s", entry.name, len(done), comp.name)

    async def _load_on(self, copies: list[Replica], entry: AdapterEntry, field: str) -> list[Replica]:
        done: list[Replica] = []
        for r in copies:
            answer = await self._call(r, "load", load_body(entry))
            if answer.status_code != 200:
                await asyncio.gather(*(self._unload_one(d, entry.name) for d in done))
                raise refusal(r, answer, field)
            r.loaded_adapters.add(entry.name)
            done.append(r)
        return done

    async def unload(self, comp: Component, name: str) -> None:
        """Unload adapter `name` from every copy of `comp`: a 409 (with Retry-After) while requests use
        it on any copy, and then it is loaded back on the copies that had unloaded it (one that cannot
        marks it failed, with that copy's reason: never on some copies and not others unseen)."""
        async with comp.adapter_lock:
            entry = unloadable(comp, name)
            comp.adapter_entries.pop(name)  # routed nowhere from now on, and no copy starts with it
            failure = comp.adapter_failures.pop(name, None)
            done: list[Replica] = []
            for r in comp.ready():
                answer = await self._call(r, "unload", {"name": name})
                if answer.status_code not in (200, 404):  # 404: that copy had it no more
                    comp.adapter_entries[name] = entry
                    if failure is not None:
                        comp.adapter_failures[name] = failure
                    await asyncio.gather(*(self._load_back(comp, d, entry) for d in done))
                    raise refusal(r, answer, "")
                r.loaded_adapters.discard(name)
                done.append(r)
        log.info("adapter %s unloaded from %d copies of %s", name, len(done), comp.name)

    async def _load_back(self, comp: Component, replica: Replica, entry: AdapterEntry) -> None:
        answer = await self._call(replica, "load", load_body(entry))
        if answer.status_code == 200:
            replica.loaded_adapters.add(entry.name)
        else:
            self._failed(comp, entry.name, refusal(replica, answer, ""))

    async def _unload_one(self, replica: Replica, name: str) -> None:
        if (await self._call(replica, "unload", {"name": name})).status_code in (200, 404):
            replica.loaded_adapters.discard(name)

    @staticmethod
    def _failed(comp: Component, name: str, why: CopyRefusal) -> None:
        comp.adapter_failures[name] = str(why)
        log.warning("adapter %s of %s failed: %s", name, comp.name, why)

    async def listing(self, comp: Component) -> list[dict[str, Any]]:
        """Each adapter of `comp`, with the ready copies that have it loaded and the requests using it."""
        answers = await asyncio.gather(*(self._get(r) for r in comp.ready()))
        return listing_rows(comp.name, comp.adapter_list(), answers, comp.adapter_failures)

    def catch_up(self, comp: Component, replica: Replica) -> None:
        """A copy became ready: out of routing until what changed since it started is loaded on it (and
        what was removed unloaded), after any adapter change under way."""
        if {a.name for a in comp.startable_adapters()} != replica.loaded_adapters:
            replica.catching_up = True
            self.spawn(self._catch_up(comp, replica))

    async def _catch_up(self, comp: Component, replica: Replica) -> None:
        try:
            async with comp.adapter_lock:
                for name in replica.loaded_adapters - set(comp.adapter_entries):
                    await self._unload_one(replica, name)
                for entry in comp.startable_adapters():
                    if entry.name in replica.loaded_adapters or replica.state != ReplicaState.READY:
                        continue
                    answer = await self._call(replica, "load", load_body(entry))
                    if answer.status_code == 200:
                        replica.loaded_adapters.add(entry.name)
                        log.info("copy %s caught up: adapter %s loaded", replica.id, entry.name)
                    elif answer.status_code < 500:  # not a copy dying: it restarts with the list
                        self._failed(comp, entry.name, refusal(replica, answer, ""))
        finally:
            replica.catching_up = False
            comp.notify()  # the requests waiting for a ready copy

    def start_failed(self, comp: Component, replica: Replica) -> None:
        """A copy failed to start: an adapter it refused (`--lora NAME: why`, as `llmhost serve` says) is
        marked failed, and its next start goes without it rather than failing again."""
        reason = replica.last_reason or ""
        for entry in comp.startable_adapters():
            if f"--lora {entry.name}: " in reason:
                self._failed(comp, entry.name, CopyRefusal(422, f"copy {replica.id}: {reason}", None))

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
