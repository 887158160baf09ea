"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens (errors in Anthropic's
shape: web/formats.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.anthropic import CountTokensRequest, MessagesRequest, check_blocks
from llmhost.server.protocol.outputs import AnthropicMessage, TokenCount, json_response
from llmhost.server.routes import deps
from llmhost.server.serving.apis.anthropic import AnthropicServing
from llmhost.web.apidoc import errors, operation
from llmhost.web.formats import AnthropicRoute

router = APIRouter(route_class=AnthropicRoute)  # refusals in Anthropic's shape
# every error in Anthropic's shape (web/formats.py): a validation error is a 400, load a 529, an unknown
# model under --strict-model-names a 404
ERRORS = errors(400, 401, 404, 413, 500, 529, style="anthropic")


def serving(request: Request) -> AnthropicServing:
    found: AnthropicServing = request.app.state.anthropic
    return found


@router.post(
    "/v1/messages",
    openapi_extra=operation(
        "Anthropic Messages",
        body=[MessagesRequest],
        success=AnthropicMessage,
        stream=True,
        errors=ERRORS,
        description=(
            "Token limits of this server are not in the schema: a prompt or max_tokens over them is a "
            "400 naming the field and the limit."
        ),
    ),
)
async def messages(request: Request) -> Response:
    raw = await deps.json_body(request)
    check_blocks(raw)
    return await serving(request).messages(MessagesRequest.model_validate(raw), request)


@router.post(
    "/v1/messages/count_tokens",
    openapi_extra=operation(
        "Anthropic token count", body=[CountTokensRequest], success=TokenCount, errors=ERRORS
    ),
)
async def count_tokens(request: Request) -> Response:
    raw = await deps.json_body(request)
    check_blocks(raw)
    return json_response(await serving(request).count_tokens(CountTokensRequest.model_validate(raw)))
