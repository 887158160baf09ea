"""OpenAI's /v1/embeddings over the embedder of a server started with --embeddings."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable
from typing import TypeVar, cast

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from llmhost.engine.embedder import EmbeddingError, Vector
from llmhost.engine.embedder_loop import AsyncEmbedder
from llmhost.engine.request import EngineError
from llmhost.server.errors import from_engine
from llmhost.server.protocol.embeddings import EmbeddingRequest
from llmhost.server.protocol.shapes import EmbeddingData, Embeddings, EmbeddingsUsage
from llmhost.server.serving.context import ServingContext
from llmhost.web.errors import APIError

T = TypeVar("T")
API = "embeddings"


def normalize(vector: Vector) -> Vector:
    """Unit L2 norm (what OpenAI and vLLM return); an all-zero vector stays as it is."""
    norm = float(np.linalg.norm(vector))
    return vector / np.float32(norm) if norm > 0 else vector


def encode(vector: Vector, encoding_format: str) -> list[float] | str:
    """base64: the little-endian float32 bytes, which the openai client decodes with numpy."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return cast(list[float], vector.tolist())


def response_body(vectors: list[Vector], encoding_format: str, model: str, n_tokens: int) -> Embeddings:
    """The answer as a TypedDict, not the EmbeddingsResponse model: thousands of floats a vector are not
    validated again."""
    data: list[EmbeddingData] = [
        {"object": "embedding", "index": i, "embedding": encode(v, encoding_format)}
        for i, v in enumerate(vectors)
    ]
    usage: EmbeddingsUsage = {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}


def render(vectors: list[Vector], encoding_format: str, model: str, n_tokens: int) -> bytes:
    """The JSON answer (JSONResponse's encoding), built off the event loop by the caller: 2048
    vectors of floats take a noticeable time to write."""
    body = response_body(vectors, encoding_format, model, n_tokens)
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def check_texts(inputs: list[str | list[int]], max_inputs: int) -> None:
    """Refusals that need no tokenizer: no input, too many, an empty one."""
    if not inputs:
        raise APIError(422, "input is empty: give at least one input", field="input", extra={"limit": 1})
    if len(inputs) > max_inputs:
        raise APIError(
            422,
            f"input has {len(inputs)} items; at most {max_inputs} are allowed per request",
            field="input",
            extra={"value": len(inputs), "limit": max_inputs},
        )
    for i, item in enumerate(inputs):
        if len(item) == 0:
            raise APIError(422, f"input {i} is empty", field="input", extra={"index": i, "limit": 1})


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_done(work: Awaitable[T], request: Request) -> T:
    """The result of `work`; a client that goes away cancels it (its inputs not yet decoded are skipped)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait([task, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        raise APIError(499, "client disconnected", "client_closed")
    return task.result()


class EmbeddingsServing:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx

    def embedder(self) -> AsyncEmbedder:
        """The embedder; a 400 if the server was not started with --embeddings, a 503 while loading."""
        embedder = self.ctx.embedder
        if embedder is None:
            raise APIError(
                400,
                "this server was not started with --embeddings, so it does not serve /v1/embeddings; "
                "start it with `llmhost serve --embeddings` (an endpoint component: `embeddings: true`)",
            )
        self.ctx.require_model()
        if embedder.pooling == "rank":
            raise APIError(
                400,
                "this model is a reranker (its GGUF pools by rank): it scores (query, document) pairs at "
                "/v1/rerank and /score, and gives no embeddings",
            )
        return embedder

    async def create(self, body: EmbeddingRequest, request: Request) -> Response:
        self.ctx.names.check(body.model)
        embedder = self.embedder()
        if body.dimensions is not None and body.dimensions != embedder.n_embd:
            raise APIError(
                400,
                f"dimensions {body.dimensions} is not supported: this model's embeddings have "
                f"{embedder.n_embd} dimensions and llama.cpp does not shorten them",
                field="dimensions",
                extra={"value": body.dimensions, "supported": embedder.n_embd},
            )
        vectors, n_tokens = await self.vectors(body.inputs(), request, API)
        model = body.model or self.ctx.settings.model_name
        content = await asyncio.to_thread(render, vectors, body.encoding_format, model, n_tokens)
        return Response(content, media_type="application/json")

    async def vectors(
        self,
        inputs: list[str | list[int]],
        request: Request,
        api: str,
        max_tokens: int | None = None,
        unit: bool = True,
    ) -> tuple[list[Vector], int]:
        """The vectors of `inputs` (`unit`: L2-normalized) and their tokens in all (`max_tokens`: each
        input's tokens cut to that many first, Ollama's `truncate`)."""
        embedder = self.embedder()
        check_texts(inputs, embedder.config.max_inputs)
        tokens = await asyncio.to_thread(self._tokenize, embedder, inputs)
        if max_tokens is not None:
            tokens = [t[:max_tokens] for t in tokens]
        try:
            vectors = await until_done(embedder.embed(tokens), request)
        except EngineError as exc:
            err = from_engine(exc)
            self.ctx.metrics.rejected.labels(reason=str(err.status)).inc()
            raise err from exc
        except EmbeddingError as exc:
            raise APIError(exc.status, f"embedding failed: {exc}", "server_error") from exc
        n_tokens = sum(len(t) for t in tokens)
        self.ctx.metrics.count(api, "stop")
        self.ctx.metrics.prompt_tokens.inc(n_tokens)
        return ([normalize(v) for v in vectors] if unit else vectors), n_tokens

    @staticmethod
    def _tokenize(embedder: AsyncEmbedder, inputs: list[str | list[int]]) -> list[list[int]]:
        """Texts get the model's special tokens (BOS), as /tokenize with add_special; ids are used as is."""
        return [embedder.tokenize(x) if isinstance(x, str) else x for x in inputs]
