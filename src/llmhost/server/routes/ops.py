"""Liveness, metrics and the tokenizer endpoints (llama-server's and vLLM's shapes)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.lifecycle import Phase
from llmhost.server.protocol.llama import DetokenizeRequest, TokenizeRequest
from llmhost.server.routes import deps
from llmhost.server.serving import tokenizer

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
    return await tokenizer.tokenize(deps.context(request), body)


@router.post("/detokenize")
async def detokenize(request: Request) -> dict[str, Any]:
    body = DetokenizeRequest.model_validate(await deps.json_body(request))
    return await tokenizer.detokenize(deps.context(request), body)


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request) -> dict[str, Any]:
    return tokenizer.tokenizer_info(deps.context(request))
