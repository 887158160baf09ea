"""TGI's routes: POST / (generate, or a stream with "stream": true), /generate, /generate_stream, /info."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from starlette.responses import JSONResponse, Response

from llmhost.server.protocol.outputs import Generation, Generations, Info, dump, json_response
from llmhost.server.protocol.tgi import TGIRequest
from llmhost.server.routes import deps
from llmhost.web.apidoc import COMMON, Shape, errors, merge, operation
from llmhost.web.formats import TGIRoute

# TGI's routes refuse in TGI's shape; the API-key check, the body limit, draining and a crash answer OpenAI's
router = APIRouter(route_class=TGIRoute)
ERRORS: dict[int, Sequence[Shape]] = merge(errors(400, 422, 429, 500, 503, style="tgi"), COMMON, errors(413))


async def _body(request: Request) -> TGIRequest:
    return TGIRequest.model_validate(deps.with_header_adapter(request, await deps.json_body(request)))


@router.post(
    "/",
    openapi_extra=operation(
        "TGI generate: a list of one generation, or a stream with `stream: true`",
        body=[TGIRequest],
        success=Generations,
        stream=True,
        errors=ERRORS,
    ),
)
async def compat_generate(request: Request) -> Response:
    body = await _body(request)
    if body.stream:
        return await deps.tgi(request).generate_stream(body)
    # TGI's compat route answers a list of one generation (its Python client reads element 0)
    return JSONResponse([dump(await deps.tgi(request).generate(body, request))])


@router.post(
    "/generate", openapi_extra=operation("TGI generate", body=[TGIRequest], success=Generation, errors=ERRORS)
)
async def generate(request: Request) -> Response:
    body = await _body(request)
    return json_response(await deps.tgi(request).generate(body, request))


@router.post(
    "/generate_stream",
    openapi_extra=operation("TGI generate, streamed", body=[TGIRequest], stream=True, errors=ERRORS),
)
async def generate_stream(request: Request) -> Response:
    body = await _body(request)
    return await deps.tgi(request).generate_stream(body)


async def info(request: Request) -> Response:
    return json_response(deps.tgi(request).info())


# /info refuses (a missing key, a crash) in llmhost's usual shape, as TGI's own server does
router.add_api_route(
    "/info",
    info,
    methods=["GET"],
    route_class_override=APIRoute,
    openapi_extra=operation("TGI model info", success=Info, errors=COMMON),
)
