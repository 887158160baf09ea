"""OpenAI's POST /v1/embeddings (a server started with --embeddings)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.embeddings import EmbeddingRequest
from llmhost.server.protocol.outputs import EmbeddingsResponse
from llmhost.server.routes import deps
from llmhost.web.apidoc import NAMED, operation

router = APIRouter()


@router.post(
    "/v1/embeddings",
    openapi_extra=operation(
        "OpenAI embeddings",
        body=[EmbeddingRequest],
        success=EmbeddingsResponse,
        errors=NAMED,
        description="A server started with --embeddings; otherwise a 400.",
    ),
)
async def embeddings(request: Request) -> Response:
    serving = deps.embeddings(request)
    serving.embedder()  # the mode first: without --embeddings, that is the answer whatever the body
    body = EmbeddingRequest.model_validate(await deps.json_body(request))
    return await serving.create(body, request)
