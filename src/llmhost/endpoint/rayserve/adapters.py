"""A Ray endpoint's LoRA adapters changed at run time, as its ingress carries them out: `/admin/adapters`
and adapter components (`POST /admin/components` with `base` and `adapter`, `DELETE
/admin/components/NAME`), with the single-host endpoint's checks, bodies and errors (`adapter_rules`).

A change is a new user_config of the component's deployment (`copy_adapters`), deployed in place as
`endpoint scale` deploys; then every copy Ray Serve routes to must report it applied it. A copy's refusal
takes the change back (the previous config deployed again, which the other copies apply) and is relayed;
copies Ray starts later get the config with their start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llmhost.endpoint.adapters.rules import (
    base_of,
    check_components,
    check_new,
    copy_refusal,
    listing_rows,
    removal,
    unloadable,
)
from llmhost.endpoint.adapters.spec import AdapterEntry, as_entry
from llmhost.endpoint.admin import BadBody, NotSupported, UpstreamError
from llmhost.endpoint.control.adapter_ops import LOAD_TIMEOUT_S
from llmhost.endpoint.rayserve.copy_adapters import AdapterReport, Refusal, user_config
from llmhost.endpoint.rayserve.relay import RayComponent
from llmhost.endpoint.rayserve.serveapi import ServeApi, ServeApiError
from llmhost.endpoint.rayserve.status import SERVING
from llmhost.endpoint.spec import ComponentSpec

log = logging.getLogger("llmhost.endpoint")
POLL_S = 0.2  # how often Ray Serve's replicas and the copies' reports are read while a change applies


@dataclass
class AdapterReports:
    """Each copy's last report of its adapters (after each change, and with its metrics' pushes)."""

    latest: dict[str, AdapterReport] = field(default_factory=dict)

    def serving(self, comp: RayComponent) -> list[tuple[str, AdapterReport | None]]:
        """The copies Ray Serve routes `comp`'s requests to, each with its report (None: none yet)."""
        return [(r.copy, self.latest.get(r.copy)) for r in comp.view.replicas if r.state in SERVING]


def local_relative(path: str) -> bool:
    return "://" not in path and not path.startswith(("/", "~"))


class RayAdapters:
    def __init__(
        self,
        app: str,
        components: dict[str, RayComponent],
        api: ServeApi,
        refresh: Callable[[], Awaitable[dict[str, Any]]],
        deploying: asyncio.Lock,
        reports: AdapterReports,
    ) -> None:
        self.app = app
        self.components = components
        self.api = api
        self.refresh = refresh  # reads Ray Serve's details: the copies, and each component's user_config
        self.deploying = deploying  # one read-change-deploy of the application's config at a time
        self.reports = reports

    def get(self, name: str) -> RayComponent:
        comp = self.components.get(name)
        if comp is None:
            known = ", ".join(sorted(self.components)) or "(none)"
            raise LookupError(f"unknown inference component {name!r}; known components: {known}")
        return comp

    def listing(self, component: str | None) -> list[dict[str, Any]]:
        """Each adapter, with the copies whose last report has it and the requests they said use it."""
        comps = [self.get(component)] if component else list(self.components.values())
        return [
            row
            for c in comps
            for row in listing_rows(
                c.name, c.adapter_entries.values(), [list(r.rows) for _, r in self.reports.serving(c) if r]
            )
        ]

    async def load(self, component: str, entry: AdapterEntry, field: str = "") -> None:
        """Load `entry` on every copy of `component` (one a copy refuses is taken back from all)."""
        comp = base_of(self.components, component)
        if local_relative(entry.path):
            raise BadBody(
                f"{field}path",
                f"{field}path: a Ray endpoint's copies run in Ray's working "
                f"directory on their nodes: give an absolute path, got {entry.path!r}",
            )
        async with comp.adapter_lock:
            check_new(self.components, entry.name, comp.name)
            await self._change(comp, [*comp.adapter_entries.values(), entry], entry.name, field)
        log.info("adapter %s loaded on the copies of %s", entry.name, comp.name)

    async def unload(self, comp: RayComponent, name: str) -> None:
        """Unload adapter `name` from every copy of `comp`: a copy's 409 (requests use it) leaves it
        everywhere."""
        async with comp.adapter_lock:
            unloadable(comp, name)
            await self._change(comp, [e for e in comp.adapter_entries.values() if e.name != name], name, "")
        log.info("adapter %s unloaded from the copies of %s", name, comp.name)

    async def add_components(self, specs: list[ComponentSpec], fixed: str) -> None:
        """Adapter components added: each loaded on its base's copies (a component with copies: `fixed`)."""
        if any(s.base is None for s in specs):
            raise NotSupported(fixed)
        check_components(self.components, specs)
        for s in specs:
            assert s.base is not None
            await self.load(s.base, as_entry(s), field="adapter.")

    async def remove(self, name: str, fixed: str) -> None:
        """Adapter component `name` deleted (unloaded from its base's copies); a component: `fixed`."""
        owner = removal(self.components, name)
        if owner is None:
            if name in self.components:
                raise NotSupported(fixed)
            self.get(name)
        else:
            await self.unload(owner, name)

    async def _change(self, comp: RayComponent, wanted: list[AdapterEntry], name: str, field: str) -> None:
        before = list(comp.adapter_entries.values())
        await self._deploy(comp, wanted)
        try:
            refused = await self._applied(comp, tuple(wanted), name)
        except UpstreamError:
            await self._deploy(comp, before)  # not known to have applied: taken back
            raise
        if refused is not None:
            copy, why = refused
            await self._deploy(comp, before)
            with contextlib.suppress(UpstreamError):  # the refusal is the answer: the rest is logged
                await self._applied(comp, tuple(before), "")
            raise copy_refusal(copy, why.status, why.text, why.retry_after, field)

    async def _deploy(self, comp: RayComponent, entries: list[AdapterEntry]) -> None:
        try:
            async with self.deploying:
                await self.api.override(self.app, {"name": comp.name, "user_config": user_config(entries)})
        except ServeApiError as exc:
            raise UpstreamError(str(exc)) from exc
        comp.configured = tuple(entries)

    async def _applied(
        self, comp: RayComponent, wanted: tuple[AdapterEntry, ...], name: str
    ) -> tuple[str, Refusal] | None:
        """Until every copy Ray routes to reported `wanted` applied; the first refusal of `name`."""
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            with contextlib.suppress(ServeApiError):  # Ray's API failing for a moment: read again
                await self.refresh()
            pending = []
            for copy, report in self.reports.serving(comp):
                if report is None or report.applied != wanted:
                    pending.append(copy)
                elif refused := next((r for r in report.refusals if r.name == name), None):
                    return copy, refused
            if not pending:
                return None
            if time.monotonic() > deadline:
                raise UpstreamError(
                    f"copies {', '.join(pending)} of component {comp.name!r} did not report "
                    f"applying the adapters within {LOAD_TIMEOUT_S:g} s"
                )
            await asyncio.sleep(POLL_S)
