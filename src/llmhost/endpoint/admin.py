"""Admin API used by `llmhost endpoint status|scale|add|remove|down`; answers loopback clients only.
One router over a backend: the single-host endpoint's manager or a Ray endpoint's Ray Serve."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import yaml
from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response

from llmhost.endpoint import bodies
from llmhost.endpoint.adapters.admin import adapter_routes, relayed
from llmhost.endpoint.adapters.rules import check_unload
from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.endpoint.apidoc import (
    ADMIN,
    Accepted,
    Added,
    ComponentStatus,
    EndpointStatus,
    Removed,
    Rescanned,
    Scaled,
    Stopping,
    Unloaded,
)
from llmhost.endpoint.control.manager import EndpointManager
from llmhost.endpoint.control.placement import InsufficientCapacityError
from llmhost.endpoint.control.variants import VariantError
from llmhost.endpoint.control_errors import (
    ComponentLoadError,
    CopyRefusal,
    ModelRefError,
)
from llmhost.endpoint.dataplane.router import error
from llmhost.endpoint.spec import ComponentList, ComponentSpec, parse_components
from llmhost.errors import BadRequestError, ConflictError, LlmhostError, NotFoundError
from llmhost.shared import yamltext
from llmhost.shared.jsontypes import JSONValue
from llmhost.web.apidoc import errors, merge, operation

LOOPBACK = {"127.0.0.1", "::1", "localhost", "testclient"}
# why a client that is not local is refused: the 403's message and the console's `why_not` alike
LOCAL_ONLY = "the admin API answers local clients only"


class BadBody(BadRequestError, ValueError):
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


class LoadRequest(BaseModel):
    """`POST /admin/models/load`: load an on-demand model as a request for it would (making room)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    model: str = Field(description="The on-demand model's name (its component).")
    wait: bool = Field(default=True, description="Answer once it is loaded (200), else at once (202).")


class WeightsRequest(BaseModel):
    """`POST /admin/weights`: new weights of some of a component's variants (SageMaker's
    UpdateEndpointWeightsAndCapacities); a shadow variant's is the percent of requests copied to it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    component: str = Field(description="The component with variants.")
    weights: dict[str, float] = Field(description="Variant name -> weight (a shadow's: percent 0-100).")


class UnloadRequest(BaseModel):
    """`POST /admin/models/unload`: drain an on-demand model's copy and stop it (pinned ones too)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    model: str = Field(description="The on-demand model's name (its component).")


B = TypeVar("B", bound=BaseModel)


def first_error(errors: Sequence[Any]) -> BadBody:
    """The first of pydantic's errors, as the admin API's 422 naming the field and the value refused."""
    err = errors[0]
    loc = [str(part) for part in err.get("loc", ()) if part != "body"]
    field = ".".join(loc) or "body"
    msg = "unknown field" if err.get("type") == "extra_forbidden" else str(err.get("msg"))
    return BadBody(field, f"{field}: {msg}, got {err.get('input')!r}")


def invalid(exc: RequestValidationError) -> BadBody:
    """FastAPI's refusal of a request model, as the admin API's 422 naming the field."""
    return first_error(exc.errors())


YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


async def json_body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise BadBody("body", f"request body is not valid JSON: {exc}") from None


async def json_or_yaml_body(request: Request) -> Any:
    """JSON, or YAML when the content type says so (what the console sends from a pasted file)."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() not in YAML_TYPES:
        return await json_body(request)
    try:
        return yamltext.load(await request.body())
    except yaml.YAMLError as exc:
        raise BadBody("body", f"request body is not valid YAML: {exc}") from None


def parse_body(model: type[B], data: Any, shape: str) -> B:
    """An admin body validated strictly by its model, refused as a 422 naming the field."""
    if not isinstance(data, dict):
        raise BadBody("body", f"body must be {shape}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise first_error(exc.errors()) from None


def scale_request(data: Any) -> ScaleRequest:
    return parse_body(ScaleRequest, data, '{"component": NAME, "copies": N, "wait": true|false}')


def terminate_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # the server's SIGTERM path: drain, stop copies, exit


class AdminRefused(LlmhostError):
    """The admin API answers local clients only (403)."""

    status = 403


class NotSupported(LlmhostError):
    """This endpoint's backend cannot do that (501)."""

    status = 501


class Conflict(ConflictError, RuntimeError):
    """The change cannot be made as things stand, e.g. copies that do not fit (409)."""


class UpstreamError(LlmhostError, RuntimeError):
    """What carries the change out failed or could not be reached (502)."""

    status = 502


class AdminBackend(Protocol):
    """What carries out the admin API: the single-host manager (`LocalAdmin`) or Ray Serve
    (`rayserve.admin.RayAdmin`). Refusals are raised as the exceptions `failure` maps."""

    @property
    def name(self) -> str: ...  # the endpoint's

    # why components with copies cannot be added or removed here (its `add` and `remove` refuse them,
    # adapter components aside); None: they can
    components_fixed: str | None

    async def status(self) -> bodies.EndpointState | bodies.RayEndpointState: ...

    async def scale(self, component: str, copies: int, wait: bool) -> bodies.Scaled: ...

    async def add(self, raw: JSONValue) -> bodies.Added: ...

    async def remove(self, name: str) -> bodies.Removed: ...

    async def load(self, model: str, wait: bool) -> bodies.ComponentState | bodies.Accepted: ...

    async def unload(self, model: str) -> bodies.Unloaded: ...

    async def reload(self) -> bodies.Rescanned: ...

    async def weights(self, component: str, weights: dict[str, float]) -> bodies.ComponentState: ...

    async def adapters(self, component: str | None) -> list[dict[str, Any]]: ...

    async def load_adapter(self, component: str, entry: AdapterEntry) -> list[dict[str, Any]]: ...

    async def unload_adapter(self, component: str, name: str) -> list[dict[str, Any]]: ...

    async def down(self) -> Callable[[], None] | None:
        """Stop the endpoint, or return what stops it once the answer is sent."""
        ...


class LocalAdmin:
    """The single-host endpoint's admin: its manager, and the process's own shutdown."""

    components_fixed: str | None = None

    def __init__(self, manager: EndpointManager, shutdown: Callable[[], None] = terminate_self) -> None:
        self.manager = manager
        self.shutdown = shutdown

    @property
    def name(self) -> str:
        return self.manager.spec.name

    async def status(self) -> bodies.EndpointState:
        return self.manager.status()

    async def scale(self, component: str, copies: int, wait: bool) -> bodies.ComponentState | bodies.Accepted:
        task = asyncio.ensure_future(self.manager.scale(component, copies))
        if not wait:
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
            return {"accepted": True}
        return await task

    async def add(self, raw: JSONValue) -> bodies.Added:
        specs = parse_components(raw, "components", strict=True)
        try:
            await self.manager.add(specs)
        except ModelRefError as exc:  # the reference is bad, not the endpoint: the body's field says which
            index = [s.name for s in specs].index(exc.component)
            listed = isinstance(raw, dict) and "components" in raw
            field = f"components[{index}].{exc.field}" if listed else exc.field
            raise BadBody(field, str(exc)) from None
        return {"added": [s.name for s in specs]}

    async def remove(self, name: str) -> bodies.Removed:
        await self.manager.remove(name)
        return {"removed": name}

    async def load(self, model: str, wait: bool) -> bodies.ComponentState | bodies.Accepted:
        if wait:
            return await self.manager.load(model)
        self.manager.on_demand(model)  # an unknown name or a declared component: refused now
        task = asyncio.ensure_future(self.manager.load(model))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
        return {"accepted": True}

    async def unload(self, model: str) -> bodies.Unloaded:
        return await self.manager.unload(model)

    async def reload(self) -> bodies.Rescanned:
        return await self.manager.reload()

    async def weights(self, component: str, weights: dict[str, float]) -> bodies.ComponentState:
        return self.manager.weights(component, weights)

    async def adapters(self, component: str | None) -> list[dict[str, Any]]:
        comps = [self.manager.get(component)] if component else list(self.manager.components.values())
        return [row for c in comps for row in await self.manager.adapters.listing(c)]

    async def load_adapter(self, component: str, entry: AdapterEntry) -> list[dict[str, Any]]:
        await self.manager.adapters.load(self.manager.adapters.base(component), entry)
        return await self.adapters(component)

    async def unload_adapter(self, component: str, name: str) -> list[dict[str, Any]]:
        comp = self.manager.get(component)
        check_unload(comp, name)
        await self.manager.adapters.unload(comp, name)
        return await self.adapters(component)

    async def down(self) -> Callable[[], None]:
        return self.shutdown


def failure(exc: Exception) -> Response:
    """An admin refusal as its JSON error; anything else is not one (the middleware's 500)."""
    if isinstance(exc, AdminRefused):
        return error(exc.status, LOCAL_ONLY, "permission_error")
    if isinstance(exc, NotSupported):
        return error(exc.status, str(exc), "not_implemented")
    if isinstance(exc, (BadBody, VariantError)):
        return error(exc.status, str(exc), field=exc.field)
    if isinstance(exc, ComponentLoadError):
        return error(exc.status, str(exc), "service_unavailable")
    if isinstance(exc, InsufficientCapacityError):
        return error(exc.status, str(exc), "insufficient_capacity")
    if isinstance(exc, CopyRefusal):
        return relayed(exc)
    if isinstance(exc, ConflictError):
        return error(exc.status, str(exc), "conflict_error")
    if isinstance(exc, LookupError):  # a KeyError too: what the request named is not there
        return error(NotFoundError.status, str(exc), "not_found_error")
    if isinstance(exc, UpstreamError):
        return error(exc.status, str(exc), "upstream_error")
    if isinstance(exc, ValueError):  # a bare one too: the body's values, refused
        return error(BadRequestError.status, str(exc))
    raise exc


class _AdminRoute(APIRoute):
    """Every admin route answers its refusals (the local-only dependency's included) through `failure`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return failure(invalid(exc))
            except (AdminRefused, NotSupported, LookupError, ValueError, RuntimeError) as exc:
                return failure(exc)

        return answer


def local_only(request: Request) -> None:
    if (request.client.host if request.client else "") not in LOOPBACK:
        raise AdminRefused


def create_admin(backend: AdminBackend) -> APIRouter:
    """The admin API (the same paths and bodies whatever the backend), for local clients only."""
    router = APIRouter(prefix="/admin", dependencies=[Depends(local_only)], route_class=_AdminRoute)
    _component_routes(router, backend)
    _model_routes(router, backend)
    adapter_routes(router, backend, json_body, parse_body)

    @router.post(
        "/down",
        openapi_extra=operation(
            "Stop the endpoint: drain the router, then the copies", success=Stopping, status=202, errors=ADMIN
        ),
    )
    async def down() -> Response:
        after = await backend.down()
        return JSONResponse(
            {"stopping": backend.name},
            status_code=202,
            background=BackgroundTask(after) if after is not None else None,
        )

    return router


def _component_routes(router: APIRouter, backend: AdminBackend) -> None:
    """/admin/status, /admin/scale and /admin/components: the components and their copies."""

    @router.get(
        "/status",
        openapi_extra=operation("The endpoint's components and copies", success=EndpointStatus, errors=ADMIN),
    )
    async def status() -> Response:
        return JSONResponse(await backend.status())

    @router.post(
        "/scale",
        openapi_extra=operation(
            "Scale a component to `copies` (202 at once with `wait: false`)",
            body=[ScaleRequest],
            success=Scaled,
            errors=merge(ADMIN, errors(202, style=Accepted), errors(404, 409, 422)),
        ),
    )
    async def scale(request: Request) -> Response:
        req = scale_request(await json_body(request))
        answer = await backend.scale(req.component, req.copies, req.wait)
        return JSONResponse(answer, status_code=200 if req.wait else 202)

    @router.post(
        "/components",
        openapi_extra=operation(
            "Add components (one component, or `components: [...]` as in the endpoint file)",
            body=[ComponentList, ComponentSpec],
            body_media=YAML_TYPES,
            success=Added,
            status=201,
            errors=merge(ADMIN, errors(409, 422)),
        ),
    )
    async def add(request: Request) -> Response:
        return JSONResponse(await backend.add(await json_or_yaml_body(request)), status_code=201)

    @router.delete(
        "/components/{name}",
        openapi_extra=operation(
            "Remove a component (its copies drained)", success=Removed, errors=merge(ADMIN, errors(404))
        ),
    )
    async def remove(name: str) -> Response:
        return JSONResponse(await backend.remove(name))

    @router.post(
        "/weights",
        openapi_extra=operation(
            "Set the weights of a component's variants (a shadow variant's: its percent of requests)",
            body=[WeightsRequest],
            success=ComponentStatus,
            errors=merge(ADMIN, errors(404, 422)),
        ),
    )
    async def weights(request: Request) -> Response:
        shape = '{"component": NAME, "weights": {VARIANT: WEIGHT, ...}}'
        req = parse_body(WeightsRequest, await json_body(request), shape)
        return JSONResponse(await backend.weights(req.component, req.weights))


def _model_routes(router: APIRouter, backend: AdminBackend) -> None:
    """/admin/models/...: on-demand models and the models_dir."""

    @router.post(
        "/models/load",
        openapi_extra=operation(
            "Load an on-demand model as a request for it would, making room (202 at once with `wait: false`)",
            body=[LoadRequest],
            success=ComponentStatus,
            errors=merge(ADMIN, errors(202, style=Accepted), errors(404, 409, 422, 503)),
        ),
    )
    async def load(request: Request) -> Response:
        req = parse_body(LoadRequest, await json_body(request), '{"model": NAME, "wait": true|false}')
        answer = await backend.load(req.model, req.wait)
        return JSONResponse(answer, status_code=200 if req.wait else 202)

    @router.post(
        "/models/unload",
        openapi_extra=operation(
            "Drain an on-demand model's copy and stop it (a pinned one too)",
            body=[UnloadRequest],
            success=Unloaded,
            errors=merge(ADMIN, errors(404, 422)),
        ),
    )
    async def unload(request: Request) -> Response:
        req = parse_body(UnloadRequest, await json_body(request), '{"model": NAME}')
        return JSONResponse(await backend.unload(req.model))

    @router.post(
        "/models/reload",
        openapi_extra=operation(
            "Scan the models_dir again: new models appear (unloaded), removed ones are drained and go",
            success=Rescanned,
            errors=merge(ADMIN, errors(409, 422)),
        ),
    )
    async def reload() -> Response:
        return JSONResponse(await backend.reload())
