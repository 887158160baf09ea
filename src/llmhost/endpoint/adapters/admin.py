"""The endpoint's `/admin/adapters`: a component's LoRA adapters listed, loaded and unloaded on all its
copies at once (`llmhost adapters --url ENDPOINT`), as one server's `/admin/adapters` does on itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from llmhost.endpoint.adapters.spec import ADAPTER_NAME, AdapterEntry, Scale
from llmhost.endpoint.apidoc import ADMIN
from llmhost.endpoint.control_errors import CopyRefusal
from llmhost.errors import ConflictError
from llmhost.web.apidoc import errors, merge, operation
from llmhost.web.errors import APIError
from llmhost.web.responses import ErrorResponse


class AdapterLoad(BaseModel):
    """`POST /admin/adapters/load`: load a LoRA adapter on every copy of a component (and on those it
    starts later)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    component: str = Field(description="The component whose copies load it.")
    name: Annotated[str, Field(pattern=ADAPTER_NAME, description="What requests name in `model`.")]
    path: Annotated[str, Field(min_length=1, description="A LoRA GGUF: a file, s3://..., hf://...")]
    scale: Scale = Field(default=1.0, description="What a request naming the adapter gets.")


class AdapterUnload(BaseModel):
    """`POST /admin/adapters/unload`: unload a LoRA adapter from every copy of a component."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    component: str = Field(description="The component whose copies load it.")
    name: str = Field(min_length=1)


class AdapterRow(BaseModel):
    name: str
    component: str  # the component whose copies load it
    path: str
    scale: float
    inference_component: bool  # an adapter inference component (DELETE /admin/components/NAME removes it)
    copies: int  # ready copies that have it loaded
    # loaded, or failed: a copy refused it after it was accepted (`reason` is the copy's); a copy starting
    # later goes without it, and requests naming it fail on the copies without it until it is unloaded
    state: str = "loaded"
    reason: str | None = None
    requests: int  # requests running or waiting with it, over those copies


class AdapterRows(BaseModel):
    object: str = "list"
    data: list[AdapterRow]


class AdapterBackend(Protocol):
    async def adapters(self, component: str | None) -> list[dict[str, Any]]: ...

    async def load_adapter(self, component: str, entry: AdapterEntry) -> list[dict[str, Any]]: ...

    async def unload_adapter(self, component: str, name: str) -> list[dict[str, Any]]: ...


def relayed(exc: CopyRefusal) -> Response:
    """A copy's refusal of an adapter, relayed with its status, field and Retry-After."""
    headers = {"Retry-After": exc.retry_after} if exc.retry_after else None
    kind = "conflict_error" if exc.status == ConflictError.status else "invalid_request_error"
    return ErrorResponse(APIError(exc.status, str(exc), kind, field=exc.field, headers=headers))


def _rows(data: list[dict[str, Any]]) -> Response:
    return JSONResponse({"object": "list", "data": data})


def adapter_routes(
    router: APIRouter,
    backend: AdapterBackend,
    body: Callable[[Request], Awaitable[Any]],
    parse: Callable[..., Any],
) -> None:
    """`body`: reads a request's JSON; `parse`: validates it by a model (the admin API's 422s)."""

    @router.get(
        "/adapters",
        openapi_extra=operation(
            "The components' LoRA adapters (`?component=NAME`: one component's), with the ready copies that "
            "have each loaded",
            success=AdapterRows,
            errors=merge(ADMIN, errors(404)),
        ),
    )
    async def listing(component: str | None = None) -> Response:
        return _rows(await backend.adapters(component))

    @router.post(
        "/adapters/load",
        openapi_extra=operation(
            "Load a LoRA adapter on every copy of a component; a copy's refusal is relayed",
            body=[AdapterLoad],
            success=AdapterRows,
            errors=merge(ADMIN, errors(404, 409, 422)),
        ),
    )
    async def load(request: Request) -> Response:
        req = parse(AdapterLoad, await body(request), '{"component": C, "name": N, "path": P, "scale": S}')
        entry = AdapterEntry(name=req.name, path=req.path, scale=req.scale)
        return _rows(await backend.load_adapter(req.component, entry))

    @router.post(
        "/adapters/unload",
        openapi_extra=operation(
            "Unload a LoRA adapter from every copy of a component (409 while requests use it)",
            body=[AdapterUnload],
            success=AdapterRows,
            errors=merge(ADMIN, errors(404, 409, 422)),
        ),
    )
    async def unload(request: Request) -> Response:
        req = parse(AdapterUnload, await body(request), '{"component": C, "name": N}')
        return _rows(await backend.unload_adapter(req.component, req.name))
