"""Liveness, metrics and llama-server's tokenizer endpoints."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.lifecycle import Phase
from llmhost.server.apidoc import BODY, errors, operation
from llmhost.server.protocol.llama import DetokenizeRequest, TokenizeRequest
from llmhost.server.protocol.outputs import Detokenized, Health, Tokens
from llmhost.server.routes import deps

router = APIRouter()


@router.get("/health", openapi_extra=operation(
    "Health: 200 once the model serves, else 503 with the same body", success=Health,
    errors={500: ("openai",), 503: (Health,)}))  # fmt: skip
async def health(request: Request) -> Response:
    engine = deps.context(request).model  # the embedder with --embeddings
    phase = deps.lifecycle(request).phase
    status = 200 if engine.ready and phase is Phase.SERVING else 503
    body = {"status": engine.state.value, "phase": phase.value, "error": engine.error}
    return JSONResponse(body, status_code=status)


@router.get("/metrics", openapi_extra=operation(
    "Prometheus metrics", media={"text/plain": "Prometheus text exposition format 0.0.4"},
    errors=errors(401, 500)))  # fmt: skip
async def metrics(request: Request) -> Response:
    body = deps.context(request).metrics.render()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.post("/tokenize", openapi_extra=operation(
    "llama-server's tokenizer", body=[TokenizeRequest], success=Tokens, errors=BODY))  # fmt: skip
async def tokenize(request: Request) -> dict[str, Any]:
    body = TokenizeRequest.model_validate(await deps.json_body(request))
    ctx = deps.context(request)
    tokens = await asyncio.to_thread(ctx.tokenize, body.content, body.add_special)
    if body.with_pieces:
        return {"tokens": [{"id": t, "piece": ctx.model.token_text(t)} for t in tokens]}
    return {"tokens": tokens}


@router.post("/detokenize", openapi_extra=operation(
    "llama-server's detokenizer", body=[DetokenizeRequest], success=Detokenized, errors=BODY))  # fmt: skip
async def detokenize(request: Request) -> dict[str, Any]:
    body = DetokenizeRequest.model_validate(await deps.json_body(request))
    ctx = deps.context(request)
    tokens = ctx.check_tokens(body.tokens, "tokens")
    return {"content": await asyncio.to_thread(ctx.model.detokenize, tokens)}
