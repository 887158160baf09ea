"""The rerank and score routes of a reranker: Jina's and Cohere's v1 shape at /v1/rerank (and
llama-server's aliases), TEI's or Jina's at /rerank (TEI's when the body has `texts`, as llama-server
reads it), Cohere's v2 at /v2/rerank, vLLM's /score and /v1/score."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.server.protocol.rerank import (
    CohereRerankRequest,
    RerankRequest,
    RerankResponse,
    ScoreRequest,
    ScoreResponse,
    TEIRank,
    TEIRerankRequest,
)
from llmhost.server.routes import deps
from llmhost.web.apidoc import NAMED, operation

router = APIRouter()
_WHEN = "A reranker's server (a GGUF of pooling type rank, or --embeddings --pooling rank); otherwise a 400."


async def _jina(request: Request) -> Response:
    apis = deps.rerank(request)
    apis.core.reranker()  # the model first: a generation model's answer whatever the body
    raw = await deps.json_body(request)
    if "texts" in raw:
        ranks = await apis.tei(TEIRerankRequest.model_validate(raw), request)
        return JSONResponse(ranks)
    return JSONResponse(await apis.rerank(RerankRequest.model_validate(raw), request))


for _path in ("/v1/rerank", "/v1/reranking", "/reranking"):
    router.add_api_route(
        _path,
        _jina,
        methods=["POST"],
        include_in_schema=_path == "/v1/rerank",
        openapi_extra=operation(
            "Rerank documents (Jina's, Cohere's v1, llama-server's and vLLM's shape)",
            body=[RerankRequest],
            success=RerankResponse,
            errors=NAMED,
            description=_WHEN + " /v1/reranking and /reranking are llama-server's aliases.",
        ),
    )


@router.post(
    "/rerank",
    openapi_extra=operation(
        "Rerank texts: TEI's shape (a body with `texts`), else Jina's",
        body=[TEIRerankRequest, RerankRequest],
        success=TEIRank,
        errors=NAMED,
        description=_WHEN + " TEI's answer is a list, best first; scores pass a sigmoid unless raw_scores.",
    ),
)
async def rerank(request: Request) -> Response:
    return await _jina(request)


@router.post(
    "/v2/rerank",
    openapi_extra=operation(
        "Rerank documents (Cohere's v2, as cohere.ClientV2.rerank sends it)",
        body=[CohereRerankRequest],
        success=RerankResponse,
        errors=NAMED,
        description=_WHEN + " Documents longer than max_tokens_per_doc (4096) are cut to it.",
    ),
)
async def rerank_v2(request: Request) -> Response:
    apis = deps.rerank(request)
    apis.core.reranker()
    body = CohereRerankRequest.model_validate(await deps.json_body(request))
    return JSONResponse(await apis.cohere(body, request))


async def _score(request: Request) -> Response:
    apis = deps.rerank(request)
    apis.core.reranker()
    body = ScoreRequest.model_validate(await deps.json_body(request))
    return JSONResponse(await apis.score(body, request))


for _path in ("/v1/score", "/score"):
    router.add_api_route(
        _path,
        _score,
        methods=["POST"],
        openapi_extra=operation(
            "Score text pairs (vLLM's: text_1 against each of text_2, or pairwise)",
            body=[ScoreRequest],
            success=ScoreResponse,
            errors=NAMED,
            description=_WHEN,
        ),
    )
