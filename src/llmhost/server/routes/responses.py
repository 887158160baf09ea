"""OpenAI's Responses API, stateless: POST /v1/responses."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.outputs import ResponseObject
from llmhost.server.protocol.responses import ResponsesRequest, check_items
from llmhost.server.routes import deps
from llmhost.server.serving.apis.responses import ResponsesServing
from llmhost.web.apidoc import NAMED, operation

router = APIRouter()


def serving(request: Request) -> ResponsesServing:
    found: ResponsesServing = request.app.state.responses
    return found


@router.post(
    "/v1/responses",
    openapi_extra=operation(
        "OpenAI Responses (stateless)",
        body=[ResponsesRequest],
        success=ResponseObject,
        stream=True,
        errors=NAMED,
    ),
)
async def create(request: Request) -> Response:
    raw = await deps.json_body(request)
    check_items(raw)
    return await serving(request).create(ResponsesRequest.model_validate(raw), request)
