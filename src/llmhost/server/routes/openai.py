from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
    ModelMeta,
)
from llmhost.server.protocol.outputs import ChatCompletionResponse, CompletionResponse
from llmhost.server.routes import deps
from llmhost.web.apidoc import COMMON, NAMED, operation

router = APIRouter()


TOKEN_LIMITS = (
    "Token limits of this server (--max-input-tokens, --max-total-tokens) are not in the schema: "
    "a prompt or max_tokens over them is a 422 naming the field and the limit."
)


@router.post(
    "/v1/completions",
    openapi_extra=operation(
        "OpenAI completions",
        body=[CompletionRequest],
        success=CompletionResponse,
        stream=True,
        errors=NAMED,
        description=TOKEN_LIMITS,
    ),
)
async def completions(request: Request) -> Response:
    body = CompletionRequest.model_validate(await deps.json_body(request))
    return await deps.openai(request).completion(body, request)


@router.post(
    "/v1/chat/completions",
    openapi_extra=operation(
        "OpenAI chat completions",
        body=[ChatCompletionRequest],
        success=ChatCompletionResponse,
        stream=True,
        errors=NAMED,
        description=TOKEN_LIMITS,
    ),
)
async def chat_completions(request: Request) -> Response:
    body = ChatCompletionRequest.model_validate(await deps.json_body(request))
    return await deps.openai(request).chat(body, request)


@router.get(
    "/v1/models",
    openapi_extra=operation("The served model and its LoRA adapters", success=ModelList, errors=COMMON),
)
async def models(request: Request) -> ModelList:
    ctx = deps.context(request)
    meta = None
    if ctx.model.ready:
        info = ctx.model.info
        meta = ModelMeta(
            n_ctx_train=info.n_ctx_train,
            n_vocab=info.n_vocab,
            n_params=info.n_params,
            size=info.size_bytes,
            description=info.description,
        )
    base = ctx.settings.model_name
    adapters = [ModelCard(id=s.name, created=ctx.started_at, parent=base) for s in ctx.adapters.specs]
    return ModelList(data=[ModelCard(id=base, created=ctx.started_at, meta=meta), *adapters])
