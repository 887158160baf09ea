"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens (errors in Anthropic's
shape: server/anthropic_errors.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.anthropic import CountTokensRequest, MessagesRequest, check_blocks
from llmhost.server.routes import deps
from llmhost.server.serving.anthropic import AnthropicServing

router = APIRouter()


def serving(request: Request) -> AnthropicServing:
    found: AnthropicServing = request.app.state.anthropic
    return found


@router.post("/v1/messages")
async def messages(request: Request) -> Response:
    raw = await deps.json_body(request)
    check_blocks(raw)
    return await serving(request).messages(MessagesRequest.model_validate(raw), request)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> dict[str, Any]:
    raw = await deps.json_body(request)
    check_blocks(raw)
    return await serving(request).count_tokens(CountTokensRequest.model_validate(raw))
