"""Liveness, metrics and the tokenizer endpoints (llama-server's and vLLM's shapes)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.process.lifecycle import Phase
from llmhost.server.protocol.llama import DetokenizeRequest, TokenizeRequest
from llmhost.server.protocol.outputs import (
    Detokenized,
    Health,
    TokenizerInfo,
    Tokens,
    VLLMTokens,
    json_response,
)
from llmhost.server.routes import deps
from llmhost.server.serving.apis import tokenizer
from llmhost.web.apidoc import BODY, COMMON, errors, operation

router = APIRouter()


@router.get(
    "/health",
    openapi_extra=operation(
        "Health: 200 once the model serves, else 503 with the same body",
        success=Health,
        errors={500: ("openai",), 503: (Health,)},
    ),
)
async def health(request: Request) -> Response:
    engine = deps.context(request).model  # the embedder with --embeddings
    phase = deps.lifecycle(request).phase
    status = 200 if engine.ready and phase is Phase.SERVING else 503
    body = {"status": engine.state.value, "phase": phase.value, "error": engine.error}
    return JSONResponse(body, status_code=status)


@router.get(
    "/metrics",
    openapi_extra=operation(
        "Prometheus metrics",
        media={"text/plain": "Prometheus text exposition format 0.0.4"},
        errors=errors(401, 500),
    ),
)
async def metrics(request: Request) -> Response:
    body = deps.context(request).metrics.render()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.post(
    "/tokenize",
    openapi_extra=operation(
        "Tokenize: llama-server's body (`content`) or vLLM's (`prompt`), answered in its shape",
        body=[TokenizeRequest],
        success=[Tokens, VLLMTokens],
        errors=BODY,
    ),
)
async def tokenize(request: Request) -> Response:
    body = TokenizeRequest.model_validate(await deps.json_body(request))
    return json_response(await tokenizer.tokenize(deps.context(request), body))


@router.post(
    "/detokenize",
    openapi_extra=operation(
        "Detokenize (the text as llama-server's `content` and vLLM's `prompt`)",
        body=[DetokenizeRequest],
        success=Detokenized,
        errors=BODY,
    ),
)
async def detokenize(request: Request) -> Response:
    body = DetokenizeRequest.model_validate(await deps.json_body(request))
    return json_response(await tokenizer.detokenize(deps.context(request), body))


@router.get(
    "/tokenizer_info",
    openapi_extra=operation(
        "vLLM's tokenizer info (what lm-eval's remote tokenizer reads)", success=TokenizerInfo, errors=COMMON
    ),
)
async def tokenizer_info(request: Request) -> Response:
    return json_response(tokenizer.tokenizer_info(deps.context(request)))
