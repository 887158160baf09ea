"""TGI's routes: POST / (generate, or a stream with "stream": true), /generate, /generate_stream, /info."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.server.errors import use_tgi_errors
from llmhost.server.protocol.tgi import TGIRequest
from llmhost.server.routes import deps

router = APIRouter()


async def _body(request: Request) -> TGIRequest:
    use_tgi_errors(request)
    return TGIRequest.model_validate(await deps.json_body(request))


@router.post("/")
async def compat_generate(request: Request) -> Response:
    body = await _body(request)
    if body.stream:
        return await deps.tgi(request).generate_stream(body)
    # TGI's compat route answers a list of one generation (its Python client reads element 0)
    return JSONResponse([await deps.tgi(request).generate(body, request)])


@router.post("/generate")
async def generate(request: Request) -> dict[str, Any]:
    body = await _body(request)
    return await deps.tgi(request).generate(body, request)


@router.post("/generate_stream")
async def generate_stream(request: Request) -> Response:
    body = await _body(request)
    return await deps.tgi(request).generate_stream(body)


@router.get("/info")
async def info(request: Request) -> dict[str, Any]:
    return deps.tgi(request).info()
