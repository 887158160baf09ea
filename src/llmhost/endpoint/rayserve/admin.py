"""The admin API of a Ray endpoint (`llmhost endpoint status|scale|down`), answered by its ingress:
the same paths and bodies as the single-host endpoint's, carried out through Ray Serve's REST API."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from llmhost.endpoint.adapters.rules import adapter_components, adapter_state, check_unload
from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.endpoint.admin import BadBody, Conflict, NotSupported, UpstreamError
from llmhost.endpoint.bodies import (
    Accepted,
    AdapterComponent,
    Added,
    ComponentState,
    RayComponentState,
    RayEndpointState,
    RayScaled,
    Removed,
    Rescanned,
    Unloaded,
)
from llmhost.endpoint.dataplane.routing import known
from llmhost.endpoint.rayserve import nodes, options, status
from llmhost.endpoint.rayserve.adapters import AdapterReports, RayAdapters
from llmhost.endpoint.rayserve.relay import RayComponent
from llmhost.endpoint.rayserve.serveapi import ServeApi, ServeApiError
from llmhost.endpoint.spec import EndpointSpec, parse_components
from llmhost.shared.jsontypes import JSONValue

log = logging.getLogger("llmhost.endpoint")
SCALE_POLL_S = 0.5
NO_ON_DEMAND = (
    "a Ray endpoint has no on-demand models (models_dir and on_demand are single-host only): "
    "Ray Serve scales each component's deployment itself"
)
NO_VARIANTS = "a Ray endpoint has no production variants (variants: is single-host only)"


class RayAdmin:
    """The admin API's backend on Ray: status from, and scaling through, Ray Serve's REST API."""

    # adapter components aside: those live on their bases' copies
    components_fixed: str | None = (
        "a Ray endpoint runs the components of its file: change the file and run "
        "`llmhost endpoint up --ray` again"
    )

    def __init__(
        self,
        spec: EndpointSpec,
        components: dict[str, RayComponent],
        api: ServeApi,
        refresh: Callable[[], Awaitable[dict[str, Any]]],
        timing: options.RayTiming,
        reports: AdapterReports | None = None,
    ) -> None:
        self.spec = spec
        self.timing = timing
        self.components = components
        self.api = api
        self.refresh = refresh  # reads Ray Serve's details and updates every component's view
        self.deploying = asyncio.Lock()  # one read-change-deploy of the application's config at a time
        self.lora = RayAdapters(
            spec.name,
            components,
            api,
            refresh,
            self.deploying,
            AdapterReports() if reports is None else reports,
        )

    def component_status(self, comp: RayComponent, override: dict[str, Any]) -> RayComponentState:
        """`override`: the component's deployment override in the deployed config (`scale` pins its
        copies and drops its autoscaling), or {}: the file's settings hold."""
        v, a = comp.view, comp.spec.autoscaling
        pinned = override.get("num_replicas") if "autoscaling_config" in override else None
        return {
            "name": comp.name,
            "model": comp.spec.model,
            "num_cpus": comp.spec.resources.num_cpus,
            "memory_mb": comp.spec.resources.memory_mb,
            "status": v.status,
            "message": v.message,
            "copies": v.target,
            "ready": v.running,
            "in_flight": comp.in_flight,
            "autoscaling": a.model_dump() if a and pinned is None else None,
            "pinned_copies": pinned,
            "requests": {str(k): n for k, n in sorted(comp.requests.items())},
            "retries": comp.retries,
            "stream_errors": comp.stream_errors,
            "routing": comp.spec.routing.policy,
            "routing_decisions": comp.routing_decisions,
            "replicas": [
                {
                    "copy": r.copy,
                    "state": r.state,
                    "node_id": r.node_id,
                    "node_ip": r.node_ip,
                    "pid": r.pid,
                    "actor_id": r.actor_id,
                }
                for r in v.replicas
            ],
            "adapters": [adapter_state(a) for a in comp.adapter_entries.values()],
            "modalities": comp.modalities,
        }

    @property
    def name(self) -> str:
        return self.spec.name

    async def status(self) -> RayEndpointState:
        try:
            details = await self.refresh()
        except ServeApiError as exc:
            raise UpstreamError(str(exc)) from exc
        return self.snapshot(details)

    def snapshot(self, details: dict[str, Any]) -> RayEndpointState:
        """`endpoint status` from Ray Serve's `details` (the components' views already read from them)."""
        app = status.application(details, self.spec.name) or {}
        overrides = {o.get("name"): o for o in status.deployment_overrides(details, self.spec.name)}
        comps = [self.component_status(c, overrides.get(c.name, {})) for c in self.components.values()]
        users: list[AdapterComponent] = [
            {"name": n, "base": c.name} for c in self.components.values() for n in adapter_components(c)
        ]
        return {
            "name": self.spec.name,
            "backend": "ray",
            "instance": self.spec.instance.model_dump(),
            "status": app.get("status", ""),
            "message": app.get("message", ""),
            "components": comps,
            "adapter_components": users,
        }

    async def scale(self, name: str, copies: int, wait: bool) -> RayScaled:
        comp = self.components.get(name)
        if comp is None:
            raise LookupError(f"unknown inference component {name!r}; known components: {known(self)}")
        if copies < 1:  # Ray Serve's config takes num_replicas >= 1; zero is its autoscaler's to reach
            raise BadBody(
                "copies",
                "a Ray endpoint scales a component to zero only through autoscaling "
                "(min_copies: 0 in the endpoint file); scale to 1 or more copies",
            )
        try:
            return await self._scale(comp, copies, wait)
        except ServeApiError as exc:
            raise UpstreamError(str(exc)) from exc
        except (RuntimeError, TimeoutError) as exc:  # Ray cannot place the copies, or not in time
            raise Conflict(str(exc)) from exc

    async def _scale(self, comp: RayComponent, copies: int, wait: bool) -> RayScaled:
        name = comp.name
        async with self.deploying:
            await self.api.override(self.spec.name, options.scale_override(comp.spec, copies))
        log.info("scaling %s to %d copies", name, copies)
        if wait:
            await self._settled(comp, copies)
        return {"component": name, "copies": copies, "ready": comp.view.running}

    async def _settled(self, comp: RayComponent, copies: int) -> None:
        """Until Ray Serve runs exactly `copies` copies (new ones passed their start, old ones drained)."""
        patience = self.timing.placement_timeout_s
        deadline = time.monotonic() + comp.spec.startup_health_check_timeout_s + patience
        placement = status.Placement(patience)
        while time.monotonic() < deadline:
            await self.refresh()
            v = comp.view
            if v.target == copies and v.running == copies and len(v.replicas) == copies:
                return
            # Ray's message outlives the copy it was about: only a copy of this target still waiting counts
            if v.unschedulable and v.target == copies and v.starting > 0:
                totals, free = await asyncio.to_thread(nodes.resources)
                why = placement.verdict(v, totals, free, time.monotonic())
                if why is not None:
                    raise RuntimeError(f"component {comp.name!r} does not fit on the Ray cluster: {why}")
            await asyncio.sleep(SCALE_POLL_S)
        raise TimeoutError(
            f"component {comp.name!r} did not reach {copies} copies; Ray says: "
            f"{comp.view.status} {comp.view.message}"
        )

    async def add(self, raw: JSONValue) -> Added:
        """Adapter components only: those with copies are the file's."""
        specs = parse_components(raw, "components", strict=True)
        await self.lora.add_components(specs, str(self.components_fixed))
        return {"added": [s.name for s in specs]}

    async def remove(self, name: str) -> Removed:
        await self.lora.remove(name, str(self.components_fixed))
        return {"removed": name}

    async def load(self, model: str, wait: bool) -> Accepted:
        raise NotSupported(NO_ON_DEMAND)

    async def unload(self, model: str) -> Unloaded:
        raise NotSupported(NO_ON_DEMAND)

    async def reload(self) -> Rescanned:
        raise NotSupported(NO_ON_DEMAND)

    async def weights(self, component: str, weights: dict[str, float]) -> ComponentState:
        raise NotSupported(NO_VARIANTS)

    async def adapters(self, component: str | None) -> list[dict[str, Any]]:
        return self.lora.listing(component)

    async def load_adapter(self, component: str, entry: AdapterEntry) -> list[dict[str, Any]]:
        await self.lora.load(component, entry)
        return self.lora.listing(component)

    async def unload_adapter(self, component: str, name: str) -> list[dict[str, Any]]:
        comp = self.lora.get(component)
        check_unload(comp, name)
        await self.lora.unload(comp, name)
        return self.lora.listing(component)

    async def down(self) -> None:
        """Ray Serve took the deletion (it drains the copies, then the ingress answering this)."""
        try:
            await self.api.delete(self.spec.name)
        except ServeApiError as exc:
            raise UpstreamError(f"deleting application {self.spec.name!r} failed: {exc}") from exc
