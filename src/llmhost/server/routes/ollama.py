"""Ollama's native API (errors in Ollama's shape: web/formats.py): /api/chat, /api/generate
(NDJSON streams), /api/embed, /api/embeddings, /api/tags, /api/show, /api/ps, /api/version, `HEAD /`;
/api/pull, /api/delete and /api/copy answer that a single server's model is fixed."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from starlette.responses import PlainTextResponse, Response

from llmhost.server.protocol import ollama as proto
from llmhost.server.protocol.outputs import json_response
from llmhost.server.routes import deps
from llmhost.server.serving.apis.ollama import NDJSON, OllamaServing
from llmhost.server.serving.apis.ollama_models import VERSION, OllamaModels
from llmhost.server.serving.apis.ollama_params import check_options
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.apidoc import COMMON, errors, operation
from llmhost.web.errors import APIError
from llmhost.web.formats import OllamaRoute

router = APIRouter(route_class=OllamaRoute)  # refusals in Ollama's shape
ERRORS = errors(400, 401, 413, 500, 503, style="ollama")
# a route naming a model: one not this server's is Ollama's 404
NAMED = errors(400, 401, 404, 413, 500, 503, style="ollama")
GENERATE = errors(400, 401, 404, 413, 429, 500, 503, style="ollama")
STREAM = {NDJSON: "With stream: true (the default): one JSON object a line, the last with done: true"}
FIXED = "a single llmhost serve has one model, fixed when it starts: it does not {what}"


def serving(request: Request) -> OllamaServing:
    found: OllamaServing = request.app.state.ollama
    return found


def models(request: Request) -> OllamaModels:
    found: OllamaModels = request.app.state.ollama_models
    return found


async def _body(request: Request) -> JSONObject:
    raw = await deps.json_body(request)
    check_options(raw)
    return raw


@router.post(
    "/api/chat",
    openapi_extra=operation(
        "Ollama chat", body=[proto.ChatRequest], success=proto.ChatResponse, media=STREAM, errors=GENERATE
    ),
)
async def chat(request: Request) -> Response:
    body = proto.ChatRequest.model_validate(await _body(request))
    return await serving(request).chat(body, request)


@router.post(
    "/api/generate",
    openapi_extra=operation(
        "Ollama generate",
        body=[proto.GenerateRequest],
        success=proto.GenerateResponse,
        media=STREAM,
        errors=GENERATE,
    ),
)
async def generate(request: Request) -> Response:
    body = proto.GenerateRequest.model_validate(await _body(request))
    return await serving(request).generate(body, request)


@router.post(
    "/api/embed",
    openapi_extra=operation(
        "Ollama embed",
        body=[proto.EmbedRequest],
        success=proto.EmbedResponse,
        errors=GENERATE,
        description="A server started with --embeddings; otherwise a 400.",
    ),
)
async def embed(request: Request) -> Response:
    return json_response(await models(request).embed(await deps.json_body(request), request))


@router.post(
    "/api/embeddings",
    openapi_extra=operation(
        "Ollama embeddings (older)",
        body=[proto.EmbeddingsRequest],
        success=proto.EmbeddingResponse,
        errors=GENERATE,
        description="A server started with --embeddings; otherwise a 400.",
    ),
)
async def embeddings(request: Request) -> Response:
    return json_response(await models(request).embeddings_v1(await deps.json_body(request), request))


@router.get("/api/tags", openapi_extra=operation("Ollama models", success=proto.TagsResponse, errors=ERRORS))
async def tags(request: Request) -> Response:
    return json_response(await models(request).tags())


@router.get(
    "/api/ps", openapi_extra=operation("Ollama loaded models", success=proto.PsResponse, errors=ERRORS)
)
async def ps(request: Request) -> Response:
    return json_response(await models(request).ps())


@router.post(
    "/api/show",
    openapi_extra=operation(
        "Ollama model information", body=[proto.ModelRequest], success=proto.ShowResponse, errors=NAMED
    ),
)
async def show(request: Request) -> Response:
    body = proto.ModelRequest.model_validate(await deps.json_body(request))
    return json_response(await models(request).show(body))


@router.get(
    "/api/version",
    openapi_extra=operation(
        "Ollama API version",
        success=proto.VersionResponse,
        errors=ERRORS,
        description="The Ollama release whose API llmhost follows.",
    ),
)
async def version() -> Response:
    return json_response(proto.VersionResponse(version=VERSION))


# outside /api/: its refusals (a missing key) are in llmhost's usual shape
ALIVE = {"errors": COMMON, "media": {"text/plain": "Ollama is running"}}


async def alive() -> Response:
    return PlainTextResponse("Ollama is running")


for _method, _summary in (("GET", "Ollama liveness"), ("HEAD", "Ollama liveness (HEAD)")):
    router.add_api_route(
        "/",
        alive,
        methods=[_method],
        route_class_override=APIRoute,
        openapi_extra=operation(_summary, **ALIVE),
    )


@router.post(
    "/api/pull",
    openapi_extra=operation(
        "Ollama pull", body=[proto.ModelRequest], errors=errors(400, 401, 500, style="ollama")
    ),
)
async def pull(request: Request) -> Response:
    proto.ModelRequest.model_validate(await deps.json_body(request)).model_name()
    raise APIError(400, FIXED.format(what="pull models"), field="model")


@router.delete(
    "/api/delete",
    openapi_extra=operation(
        "Ollama delete", body=[proto.ModelRequest], errors=errors(400, 401, 500, style="ollama")
    ),
)
async def delete(request: Request) -> Response:
    proto.ModelRequest.model_validate(await deps.json_body(request)).model_name()
    raise APIError(400, FIXED.format(what="delete models"), field="model")


@router.post(
    "/api/copy",
    openapi_extra=operation(
        "Ollama copy", body=[proto.CopyRequest], errors=errors(400, 401, 500, style="ollama")
    ),
)
async def copy(request: Request) -> Response:
    proto.CopyRequest.model_validate(await deps.json_body(request))
    raise APIError(400, FIXED.format(what="copy models"), field="source")
