"""TEI's (text-embeddings-inference's) POST /embed, on any server with an embedder: one started with
--embeddings, or a generation server (its side embedder)."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.tei import EmbedRequest, EmbedResponse
from llmhost.server.routes import deps
from llmhost.server.serving.apis import tei
from llmhost.web.apidoc import COMMON, Shape, errors, merge, operation
from llmhost.web.formats import TEIRoute

# TEI's route refuses in TEI's shape; the API-key check, the body limit, draining and a crash answer OpenAI's
router = APIRouter(route_class=TEIRoute)
ERRORS: dict[int, Sequence[Shape]] = merge(errors(400, 422, 429, 500, 503, style="tei"), COMMON, errors(413))


@router.post(
    "/embed",
    openapi_extra=operation(
        "TEI embed: one vector per input, as a JSON array of arrays",
        body=[EmbedRequest],
        success=EmbedResponse,
        errors=ERRORS,
        description="Any server with an embedder: --embeddings, or a generation server without "
        "--no-chat-embeddings.",
    ),
)
async def embed(request: Request) -> Response:
    serving = deps.embeddings(request)
    serving.embedder()  # whether the server embeds first, whatever the body
    body = EmbedRequest.model_validate(await deps.json_body(request))
    return await tei.embed(serving, body, request)
