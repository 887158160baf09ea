"""Admin API used by `llmhost endpoint status|scale|add|remove|down`; answers loopback clients only."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response

from llmhost.endpoint.manager import ComponentError, ComponentExistsError, EndpointManager, ModelRefError
from llmhost.endpoint.placement import InsufficientCapacityError
from llmhost.endpoint.router import error
from llmhost.endpoint.spec import SpecError, parse_components

LOOPBACK = {"127.0.0.1", "::1", "localhost", "testclient"}


class BadBody(ValueError):
    """A request body the admin API refuses (422); `field` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class ScaleRequest(BaseModel):
    """`POST /admin/scale`, as the single-host endpoint and the Ray one take it: strict, so that
    "false" is no boolean and true no number."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    component: str
    copies: int = Field(ge=0)
    wait: bool = True


async def json_body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise BadBody("body", f"request body is not valid JSON: {exc}") from None


def scale_request(data: Any) -> ScaleRequest:
    if not isinstance(data, dict):
        raise BadBody("body", 'body must be {"component": NAME, "copies": N, "wait": true|false}')
    try:
        return ScaleRequest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(part) for part in err["loc"]) or "body"
        msg = "unknown field" if err["type"] == "extra_forbidden" else str(err["msg"])
        raise BadBody(field, f"{field}: {msg}, got {err.get('input')!r}") from None


def terminate_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # the server's SIGTERM path: drain, stop copies, exit


def create_admin(manager: EndpointManager, shutdown: Callable[[], None] = terminate_self) -> APIRouter:
    router = APIRouter(prefix="/admin")

    def refused(request: Request) -> Response | None:
        host = request.client.host if request.client else ""
        if host not in LOOPBACK:
            return error(403, "the admin API answers local clients only", "permission_error")
        return None

    def failure(exc: Exception) -> Response:
        if isinstance(exc, ComponentExistsError):
            return error(409, str(exc), "conflict_error")
        if isinstance(exc, ComponentError):
            return error(404, str(exc), "not_found_error")
        if isinstance(exc, InsufficientCapacityError):
            return error(409, str(exc), "insufficient_capacity")
        return error(422, str(exc), field=exc.field if isinstance(exc, BadBody) else None)

    @router.get("/status")
    async def status(request: Request) -> Response:
        return refused(request) or JSONResponse(manager.status())

    @router.post("/scale")
    async def scale(request: Request) -> Response:
        if (r := refused(request)) is not None:
            return r
        try:
            req = scale_request(await json_body(request))
            task = asyncio.ensure_future(manager.scale(req.component, req.copies))
            if not req.wait:
                task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
                return JSONResponse({"accepted": True}, status_code=202)
            return JSONResponse(await task)
        except (ComponentError, InsufficientCapacityError, ValueError) as exc:
            return failure(exc)

    @router.post("/components")
    async def add(request: Request) -> Response:
        if (r := refused(request)) is not None:
            return r
        specs = []
        try:
            raw = await json_body(request)
            specs = parse_components(raw, "components")
            await manager.add(specs)
            return JSONResponse({"added": [s.name for s in specs]}, status_code=201)
        except ModelRefError as exc:  # the reference is bad, not the endpoint: the body's field says which
            index = [s.name for s in specs].index(exc.component)
            field = f"components[{index}].model" if "components" in raw else "model"
            return error(422, str(exc), field=field)
        except (ComponentError, InsufficientCapacityError, SpecError, BadBody) as exc:
            return failure(exc)

    @router.delete("/components/{name}")
    async def remove(request: Request, name: str) -> Response:
        if (r := refused(request)) is not None:
            return r
        try:
            await manager.remove(name)
        except ComponentError as exc:
            return failure(exc)
        return JSONResponse({"removed": name})

    @router.post("/down")
    async def down(request: Request) -> Response:
        if (r := refused(request)) is not None:
            return r
        return JSONResponse(
            {"stopping": manager.spec.name}, status_code=202, background=BackgroundTask(shutdown)
        )

    return router
