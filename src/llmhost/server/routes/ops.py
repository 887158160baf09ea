"""Liveness, metrics and llama-server's tokenizer endpoints."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.lifecycle import Phase
from llmhost.server.protocol.llama import DetokenizeRequest, TokenizeRequest
from llmhost.server.routes import deps

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> Response:
    engine = deps.context(request).model  # the embedder with --embeddings
    phase = deps.lifecycle(request).phase
    status = 200 if engine.ready and phase is Phase.SERVING else 503
    body = {"status": engine.state.value, "phase": phase.value, "error": engine.error}
    return JSONResponse(body, status_code=status)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    body = deps.context(request).metrics.render()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.post("/tokenize")
async def tokenize(request: Request) -> dict[str, Any]:
    body = TokenizeRequest.model_validate(await deps.json_body(request))
    ctx = deps.context(request)
    tokens = await asyncio.to_thread(ctx.tokenize, body.content, body.add_special)
    if body.with_pieces:
        return {"tokens": [{"id": t, "piece": ctx.model.token_text(t)} for t in tokens]}
    return {"tokens": tokens}


@router.post("/detokenize")
async def detokenize(request: Request) -> dict[str, Any]:
    body = DetokenizeRequest.model_validate(await deps.json_body(request))
    ctx = deps.context(request)
    tokens = ctx.check_tokens(body.tokens, "tokens")
    return {"content": await asyncio.to_thread(ctx.model.detokenize, tokens)}
