from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.tgi import TGIRequest
from llmhost.server.routes import deps

router = APIRouter()


@router.post("/generate")
async def generate(request: Request) -> dict[str, Any]:
    body = TGIRequest.model_validate(await deps.json_body(request))
    return await deps.tgi(request).generate(body, request)


@router.post("/generate_stream")
async def generate_stream(request: Request) -> Response:
    body = TGIRequest.model_validate(await deps.json_body(request))
    return await deps.tgi(request).generate_stream(body)
