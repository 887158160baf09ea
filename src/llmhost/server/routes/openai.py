from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.openai import ChatCompletionRequest, CompletionRequest, ModelCard, ModelList
from llmhost.server.routes import deps

router = APIRouter()


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    body = CompletionRequest.model_validate(await deps.json_body(request))
    return await deps.openai(request).completion(body, request)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    body = ChatCompletionRequest.model_validate(await deps.json_body(request))
    return await deps.openai(request).chat(body, request)


@router.get("/v1/models")
async def models(request: Request) -> ModelList:
    ctx = deps.context(request)
    meta = None
    if ctx.model.ready:
        info = ctx.model.info
        meta = {
            "n_ctx_train": info.n_ctx_train,
            "n_vocab": info.n_vocab,
            "n_params": info.n_params,
            "size": info.size_bytes,
            "description": info.description,
        }
    return ModelList(data=[ModelCard(id=ctx.settings.model_name, created=ctx.started_at, meta=meta)])
