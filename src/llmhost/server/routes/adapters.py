"""LoRA adapters loaded and unloaded while the server runs."""

from __future__ import annotations

from fastapi import APIRouter, Request

from llmhost.server.protocol.adapters import AdapterList, LoadAdapterRequest, UnloadAdapterRequest
from llmhost.server.routes import deps
from llmhost.web.apidoc import BODY, COMMON, errors, merge, operation

router = APIRouter()


@router.get(
    "/admin/adapters",
    openapi_extra=operation(
        "The LoRA adapters this server knows: loaded now or not (--max-loras), requests using each",
        success=AdapterList,
        errors=COMMON,
    ),
)
async def adapters(request: Request) -> AdapterList:
    return await deps.adapter_admin(request).listing()


@router.post(
    "/admin/adapters/load",
    openapi_extra=operation(
        "Load a LoRA adapter for the served model: requests select it by name from then on",
        body=[LoadAdapterRequest],
        success=AdapterList,
        errors=merge(BODY, errors(404, 409)),
    ),
)
async def load(request: Request) -> AdapterList:
    body = LoadAdapterRequest.model_validate(await deps.json_body(request))
    return await deps.adapter_admin(request).load(body)


@router.post(
    "/admin/adapters/unload",
    openapi_extra=operation(
        "Unload a LoRA adapter no request is using",
        body=[UnloadAdapterRequest],
        success=AdapterList,
        errors=merge(BODY, errors(404, 409)),
    ),
)
async def unload(request: Request) -> AdapterList:
    body = UnloadAdapterRequest.model_validate(await deps.json_body(request))
    return await deps.adapter_admin(request).unload(body)
