"""SageMaker's container contract: GET /ping, POST /invocations (the body decides the API; a JSON Lines
body is a Batch Transform mini-batch, answered line by line), GET /execution-parameters."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.server.errors import refused_in
from llmhost.server.protocol.batch_transform import JSONLINES, ExecutionParameters, is_jsonlines
from llmhost.server.protocol.embeddings import EmbeddingRequest
from llmhost.server.protocol.openai import ChatCompletionRequest, CompletionRequest
from llmhost.server.protocol.outputs import (
    ChatCompletionResponse,
    CompletionResponse,
    EmbeddingsResponse,
    Generations,
    dump,
    json_response,
)
from llmhost.server.protocol.rerank import RerankRequest, RerankResponse, TEIRank, TEIRerankRequest
from llmhost.server.protocol.tei import EmbedRequest
from llmhost.server.protocol.tgi import TGIRequest
from llmhost.server.routes import deps
from llmhost.server.serving.apis import tei
from llmhost.web.apidoc import COMMON, GENERATE, errors, merge, operation
from llmhost.web.errors import APIError, retry_after
from llmhost.web.formats import TEI, TGI

router = APIRouter()
# what /invocations reads, by the member the body has: `messages`, `prompt`, `input`, `query` or `inputs`
BODIES = [
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    TEIRerankRequest,
    RerankRequest,
    TGIRequest,
]
ANSWERS = [
    ChatCompletionResponse,
    CompletionResponse,
    EmbeddingsResponse,
    TEIRank,
    RerankResponse,
    Generations,
]
# TGI bodies are answered in TGI's error shape
ERRORS = merge(GENERATE, errors(400, 422, 429, 500, 503, style="tgi"))
INVOCATIONS = (
    "The body decides the API: `messages` (OpenAI chat), `prompt` (OpenAI completion), `input` (OpenAI "
    "embeddings, with --embeddings), `query` with `texts` (TEI's rerank on a reranker, its SageMaker "
    "container's shape) or with `documents` (Jina's / Cohere's rerank) or `inputs` (TGI, answered and "
    "refused in TGI's shapes; on an embeddings server, TEI's /embed, as its SageMaker container). A model "
    "directory with code/inference.py answers with its input_fn / predict_fn / output_fn instead, reading "
    "the content types its input_fn accepts. A body of Content-Type application/jsonlines (or "
    "application/jsonl, application/x-jsonlines) is SageMaker Batch Transform's mini-batch: one such "
    "JSON body a line (empty lines skipped), answered in application/jsonlines, one answer a line in the "
    "body's order; the records run at once, up to MaxConcurrentTransforms. A record refused refuses the "
    "body: its status and refusal, `line` naming it (1-based); a record cannot stream."
)
PARAMETERS = (
    "How SageMaker Batch Transform may call /invocations: MaxPayloadInMB is the body limit enforced "
    "(--max-payload-mb, SAGEMAKER_MAX_PAYLOAD_IN_MB), BatchStrategy whether a JSON Lines body may hold "
    "several records (--batch-strategy, SAGEMAKER_BATCH_STRATEGY), MaxConcurrentTransforms the records "
    "of one body run at once (--max-concurrent-transforms, SAGEMAKER_MAX_CONCURRENT_TRANSFORMS, else "
    "--max-concurrent)."
)


@router.get(
    "/ping",
    openapi_extra=operation(
        "SageMaker's health check: 200 (no body) once the model serves, else 503",
        errors=merge(errors(503, style="none"), errors(500)),
    ),
)
async def ping(request: Request) -> Response:
    ctx = deps.context(request)
    if ctx.model.ready and deps.lifecycle(request).accepting:
        return Response(status_code=200)
    return Response(status_code=503, headers=retry_after())


@router.post(
    "/invocations",
    openapi_extra=operation(
        "SageMaker's inference call",
        body=BODIES,
        success=ANSWERS,
        stream=True,
        media={JSONLINES: "A JSON Lines body's answers: one JSON answer a line, in the body's order"},
        errors=ERRORS,
        description=INVOCATIONS,
    ),
)
async def invocations(request: Request) -> Response:
    custom = deps.custom(request)
    if custom is not None:  # inference.py's input_fn / predict_fn / output_fn, defaults as below
        return await custom.invoke(request, invoke)
    if is_jsonlines(request.headers.get("content-type")):
        return await deps.batch(request).answer(await request.body(), lambda body: invoke(request, body))
    return await invoke(request, await deps.json_body(request))


@router.get(
    "/execution-parameters",
    openapi_extra=operation(
        "SageMaker Batch Transform's execution parameters",
        success=ExecutionParameters,
        errors=COMMON,
        description=PARAMETERS,
    ),
)
async def execution_parameters(request: Request) -> Response:
    return json_response(deps.batch(request).parameters())


async def invoke(request: Request, body: dict[str, Any]) -> Response:
    """What /invocations answers for `body` (the SageMaker Runtime paths answer the same), with the
    adapter SageMaker's adapter header names (an adapter inference component)."""
    if "inputs" in body:
        with refused_in(TGI):
            body = deps.with_header_adapter(request, body)
    else:
        body = deps.with_header_adapter(request, body)
    if "messages" in body:
        chat = ChatCompletionRequest.model_validate(body)
        return await deps.openai(request).chat(chat, request)
    if "prompt" in body:
        completion = CompletionRequest.model_validate(body)
        return await deps.openai(request).completion(completion, request)
    if "input" in body:  # OpenAI embeddings (a server started with --embeddings)
        deps.embeddings(request).embedder()
        return await deps.embeddings(request).create(EmbeddingRequest.model_validate(body), request)
    if "query" in body and "texts" in body:  # TEI's SageMaker container on a reranker
        return JSONResponse(await deps.rerank(request).tei(TEIRerankRequest.model_validate(body), request))
    if "query" in body and "documents" in body:
        return JSONResponse(await deps.rerank(request).rerank(RerankRequest.model_validate(body), request))
    if "inputs" in body and deps.context(request).embedder is not None:  # TEI's container: /embed
        with refused_in(TEI):
            return await tei.embed(deps.embeddings(request), EmbedRequest.model_validate(body), request)
    if "inputs" in body:  # as SageMaker's TGI containers do, answered (errors too) in TGI's shapes
        with refused_in(TGI):
            tgi = TGIRequest.model_validate(body)
            if tgi.stream:
                return await deps.tgi(request).generate_stream(tgi)
            return JSONResponse([dump(await deps.tgi(request).generate(tgi, request))])
    raise APIError(
        422,
        "body must have 'inputs' (TGI), 'messages' (OpenAI chat), 'prompt' (OpenAI completion), "
        "'input' (OpenAI embeddings), or 'query' with 'texts' (TEI rerank) or 'documents' (rerank)",
        field="inputs",
    )
