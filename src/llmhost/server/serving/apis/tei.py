"""TEI's (text-embeddings-inference's) POST /embed, over the server's embedder."""

from __future__ import annotations

import asyncio
import json

from starlette.requests import Request
from starlette.responses import Response

from llmhost.engine.embedder import Vector
from llmhost.server.protocol.tei import EmbedRequest
from llmhost.server.serving.apis.embeddings import EmbeddingsServing
from llmhost.server.serving.apis.truncation import Cut
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

API = "tei"


def render(vectors: list[Vector]) -> bytes:
    """TEI's answer: a JSON array of one array of floats per input."""
    rows = [v.tolist() for v in vectors]
    return json.dumps(rows, allow_nan=False, separators=(",", ":")).encode()


async def embed(serving: EmbeddingsServing, body: EmbedRequest, request: Request) -> Response:
    if body.prompt_name is not None:
        raise APIError(
            422,
            f"prompt_name {body.prompt_name!r}: this model has no prompts (TEI reads them from a "
            "sentence-transformers config, which a GGUF does not carry); prepend the prompt to the inputs",
            field="prompt_name",
        )
    texts: list[str | list[int]] = list(body.texts())
    if not texts:  # TEI's own refusal of an empty batch: a 400 of type Empty
        empty: JSONObject = {"limit": 1, "error_type": "Empty"}
        raise APIError(400, "inputs cannot be empty", field="inputs", extra=empty)
    embedder = await serving.ready()
    cut = Cut(embedder.config.max_input_tokens, body.truncation_direction) if body.truncate else None
    vectors, _ = await serving.vectors(
        texts, request, API, cut, unit=body.normalize, dimensions=body.dimensions, field="inputs"
    )
    return Response(await asyncio.to_thread(render, vectors), media_type="application/json")
