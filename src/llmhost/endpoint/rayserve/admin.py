"""The admin API of a Ray endpoint (`llmhost endpoint status|scale|down`), answered by its ingress:
the same paths and bodies as the single-host endpoint's, carried out through Ray Serve's REST API."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.endpoint.admin import LOOPBACK, BadBody, json_body, scale_request
from llmhost.endpoint.rayserve import nodes, options, status
from llmhost.endpoint.rayserve.relay import RayComponent
from llmhost.endpoint.rayserve.serveapi import ServeApi, ServeApiError
from llmhost.endpoint.routing import error, known
from llmhost.endpoint.spec import EndpointSpec

log = logging.getLogger("llmhost.endpoint")
SCALE_POLL_S = 0.5


class RayAdmin:
    def __init__(self, spec: EndpointSpec, components: dict[str, RayComponent], api: ServeApi,
                 refresh: Callable[[], Awaitable[dict[str, Any]]],
                 timing: options.RayTiming) -> None:  # fmt: skip
        self.spec = spec
        self.timing = timing
        self.components = components
        self.api = api
        self.refresh = refresh  # reads Ray Serve's details and updates every component's view

    def component_status(self, comp: RayComponent, override: dict[str, Any]) -> dict[str, Any]:
        """`override`: the component's deployment override in the deployed config (`scale` pins its
        copies and drops its autoscaling), or {}: the file's settings hold."""
        v, a = comp.view, comp.spec.autoscaling
        pinned = override.get("num_replicas") if "autoscaling_config" in override else None
        return {
            "name": comp.name, "model": comp.spec.model, "num_cpus": comp.spec.resources.num_cpus,
            "memory_mb": comp.spec.resources.memory_mb, "status": v.status, "message": v.message,
            "copies": v.target, "ready": v.running, "in_flight": comp.in_flight,
            "autoscaling": a.model_dump() if a and pinned is None else None, "pinned_copies": pinned,
            "requests": {str(k): n for k, n in sorted(comp.requests.items())}, "retries": comp.retries,
            "stream_errors": comp.stream_errors,
            "replicas": [{"copy": r.copy, "state": r.state, "node_id": r.node_id, "node_ip": r.node_ip,
                          "pid": r.pid, "actor_id": r.actor_id} for r in v.replicas],
        }  # fmt: skip

    async def status(self) -> dict[str, Any]:
        details = await self.refresh()
        app = status.application(details, self.spec.name) or {}
        overrides = {o.get("name"): o for o in status.deployment_overrides(details, self.spec.name)}
        comps = [self.component_status(c, overrides.get(c.name, {})) for c in self.components.values()]
        return {"name": self.spec.name, "backend": "ray", "instance": self.spec.instance.model_dump(),
                "status": app.get("status", ""), "message": app.get("message", ""),
                "components": comps}  # fmt: skip

    async def scale(self, name: str, copies: int, wait: bool) -> dict[str, Any]:
        comp = self.components.get(name)
        if comp is None:
            raise LookupError(f"unknown inference component {name!r}; known components: {known(self)}")
        if copies < 1:  # Ray Serve's config takes num_replicas >= 1; zero is its autoscaler's to reach
            raise ValueError("a Ray endpoint scales a component to zero only through autoscaling "
                             "(min_copies: 0 in the endpoint file); scale to 1 or more copies")  # fmt: skip
        details = await self.api.details()
        app = status.application(details, self.spec.name)
        if app is None or not app.get("deployed_app_config"):
            raise LookupError(f"application {self.spec.name!r} is not deployed on this Ray cluster")
        config = dict(app["deployed_app_config"])
        overrides = status.deployment_overrides(details, self.spec.name)
        config["deployments"] = status.with_override(overrides, options.scale_override(comp.spec, copies))
        await self.api.deploy(config)
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
        raise TimeoutError(f"component {comp.name!r} did not reach {copies} copies; Ray says: "
                           f"{comp.view.status} {comp.view.message}")  # fmt: skip

    async def down(self) -> None:
        """Ray Serve took the deletion (it drains the copies, then the ingress answering this)."""
        await self.api.delete(self.spec.name)


def _refused(request: Request) -> Response | None:
    host = request.client.host if request.client else ""
    if host not in LOOPBACK:
        return error(403, "the admin API answers local clients only", "permission_error")
    return None


def create_ray_admin(admin: RayAdmin) -> APIRouter:
    router = APIRouter(prefix="/admin")

    @router.get("/status")
    async def get_status(request: Request) -> Response:
        if (r := _refused(request)) is not None:
            return r
        try:
            return JSONResponse(await admin.status())
        except ServeApiError as exc:
            return error(502, str(exc), "upstream_error")

    @router.post("/scale")
    async def scale(request: Request) -> Response:
        if (r := _refused(request)) is not None:
            return r
        try:
            req = scale_request(await json_body(request))
            answer = await admin.scale(req.component, req.copies, req.wait)
            return JSONResponse(answer, status_code=200 if req.wait else 202)
        except BadBody as exc:
            return error(422, str(exc), field=exc.field)
        except LookupError as exc:
            return error(404, str(exc), "not_found_error")
        except ServeApiError as exc:
            return error(502, str(exc), "upstream_error")
        except (RuntimeError, TimeoutError) as exc:  # Ray cannot place the copies, or not in time
            return error(409, str(exc), "conflict_error")
        except ValueError as exc:
            return error(422, str(exc), field="copies")

    @router.post("/down")
    async def down(request: Request) -> Response:
        if (r := _refused(request)) is not None:
            return r
        try:
            await admin.down()
        except ServeApiError as exc:
            return error(502, f"deleting application {admin.spec.name!r} failed: {exc}", "upstream_error")
        return JSONResponse({"stopping": admin.spec.name}, status_code=202)

    @router.api_route("/components", methods=["POST"])
    @router.api_route("/components/{name}", methods=["DELETE"])
    async def unsupported(request: Request) -> Response:
        return _refused(request) or error(501, "a Ray endpoint runs the components of its file: change the "
                                          "file and run `llmhost endpoint up --ray` again", "not_implemented")

    return router
