"""Liveness, metrics and llama-server's tokenizer endpoints."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.server.protocol.llama import DetokenizeRequest, TokenizeRequest
from llmhost.server.routes import deps

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> Response:
    engine = deps.context(request).engine
    status = 200 if engine.ready else 503
    return JSONResponse({"status": engine.state.value, "error": engine.error}, status_code=status)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    body = deps.context(request).metrics.render()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.post("/tokenize")
async def tokenize(request: Request) -> dict[str, Any]:
    body = TokenizeRequest.model_validate(await deps.json_body(request))
    ctx = deps.context(request)
    tokens = ctx.tokenize(body.content, add_special=body.add_special)
    if body.with_pieces:
        return {"tokens": [{"id": t, "piece": ctx.engine.token_text(t)} for t in tokens]}
    return {"tokens": tokens}


@router.post("/detokenize")
async def detokenize(request: Request) -> dict[str, Any]:
    body = DetokenizeRequest.model_validate(await deps.json_body(request))
    ctx = deps.context(request)
    return {"content": ctx.engine.detokenize(ctx.check_tokens(body.tokens, "tokens"))}
