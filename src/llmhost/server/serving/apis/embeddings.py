"""OpenAI's /v1/embeddings over the server's embedder: the --embeddings mode's, or a generation
server's side embedder (server/serving/side_embedder.py). Ollama's and TEI's embeddings go through
`EmbeddingsServing.vectors` too."""

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
from llmhost.server.serving.apis.truncation import Cut, cut_inputs
from llmhost.server.serving.context import ServingContext
from llmhost.server.tracing import EMBEDDINGS, RERANK, embedded
from llmhost.web.errors import APIError

T = TypeVar("T")
API = "embeddings"


def normalize(vector: Vector) -> Vector:
    """Unit L2 norm (what OpenAI and vLLM return); an all-zero vector stays as it is."""
    norm = float(np.linalg.norm(vector))
    return vector / np.float32(norm) if norm > 0 else vector


def check_dimensions(dimensions: int | None, n_embd: int) -> None:
    """More dimensions than the model's vectors have: a 400 naming `dimensions` and the limit."""
    if dimensions is not None and dimensions > n_embd:
        raise APIError(
            400,
            f"dimensions {dimensions} is over this model's {n_embd}: a vector can be shortened to its first "
            "components (Matryoshka), not lengthened",
            field="dimensions",
            extra={"value": dimensions, "limit": n_embd},
        )


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


def check_count(n_items: int, max_items: int, field: str) -> None:
    """A request's inputs (a reranker's pairs) counted: none, or more than `max_items`, is a 422 naming
    `field` and the limit."""
    if n_items == 0:
        raise APIError(422, f"{field} is empty: give at least one", field=field, extra={"limit": 1})
    if n_items > max_items:
        raise APIError(
            422,
            f"{field} has {n_items} items; at most {max_items} are allowed per request",
            field=field,
            extra={"value": n_items, "limit": max_items},
        )


def check_texts(inputs: list[str | list[int]], max_inputs: int, field: str = "input") -> None:
    """Refusals that need no tokenizer: no input, too many, an empty one (each naming `field`)."""
    check_count(len(inputs), max_inputs, field)
    for i, item in enumerate(inputs):
        if len(item) == 0:
            raise APIError(422, f"{field} {i} is empty", field=field, extra={"index": i, "limit": 1})


async def pooled(
    ctx: ServingContext,
    embedder: AsyncEmbedder,
    tokens: list[list[int]],
    request: Request,
    api: str,
    field: str,
    work: str = "embedding",
) -> tuple[list[Vector], int]:
    """The pooled vectors of `tokens` as the model gives them (a reranker's: its scores) and their tokens
    in all, counted in the metrics as `api`. The engine's refusals name `field` (the API's own name for
    its inputs); a failed decode is a 500 saying the `work` failed."""
    try:
        vectors = await until_done(embedder.embed(tokens), request)
    except EngineError as exc:
        err = from_engine(exc)
        if err.field == "input" and field != "input":
            err.field, err.message = field, f"{field}: {err.message}"
        ctx.metrics.rejected.labels(reason=str(err.status)).inc()
        raise err from exc
    except EmbeddingError as exc:
        raise APIError(exc.status, f"{work} failed: {exc}", "server_error") from exc
    n_tokens = sum(len(t) for t in tokens)
    embedded(EMBEDDINGS if work == "embedding" else RERANK, n_tokens, ctx.settings.model_name)
    ctx.metrics.count(api, "stop")
    ctx.metrics.prompt_tokens.inc(n_tokens)
    return vectors, n_tokens


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
        """The embedder that serves, checked without waiting for it (asked before the body is read):
        a 400 where none does (--no-chat-embeddings) or the model is a reranker, a 503 while the
        --embeddings model loads. A generation server's may not be loaded yet: `ready` waits for it."""
        embedder = self.ctx.embedder
        if embedder is not None:
            self.ctx.require_model()
        elif self.ctx.side_embedder is not None:
            embedder = self.ctx.side_embedder.worker
        else:
            raise APIError(
                400,
                "this server was started with --no-chat-embeddings, so it does not serve /v1/embeddings; "
                "start it without that flag, or with `llmhost serve --embeddings` (an endpoint component: "
                "`embeddings: true`)",
            )
        if embedder.ready and embedder.pooling == "rank":
            raise APIError(
                400,
                "this model is a reranker (its GGUF pools by rank): it scores (query, document) pairs at "
                "/v1/rerank and /score, and gives no embeddings",
            )
        return embedder

    async def ready(self) -> AsyncEmbedder:
        """The embedder that serves, loaded (a generation server's side embedder loads on the first
        request), with `embedder`'s refusals."""
        self.embedder()
        await self.ctx.embeddings_model()
        return self.embedder()

    def check_base(self, model: str | None) -> None:
        """A request naming a LoRA adapter: a 400, as the embeddings context runs the base model alone
        (its vectors would not be the adapter's)."""
        name = (model or "").removesuffix(":latest")
        if name and name not in self.ctx.names.served and self.ctx.adapters.knows(name):
            raise APIError(
                400,
                f"model {name!r} is a LoRA adapter: embeddings come from the base model "
                f"{self.ctx.settings.model_name!r}, without adapters",
                field="model",
            )

    async def create(self, body: EmbeddingRequest, request: Request) -> Response:
        self.ctx.names.check(body.model)
        self.check_base(body.model)
        vectors, n_tokens = await self.vectors(body.inputs(), request, API, dimensions=body.dimensions)
        model = body.model or self.ctx.settings.model_name
        content = await asyncio.to_thread(render, vectors, body.encoding_format, model, n_tokens)
        return Response(content, media_type="application/json")

    async def vectors(
        self,
        inputs: list[str | list[int]],
        request: Request,
        api: str,
        cut: Cut | None = None,
        unit: bool = True,
        dimensions: int | None = None,
        field: str = "input",
    ) -> tuple[list[Vector], int]:
        """The vectors of `inputs` and their tokens in all: `cut`, each input's tokens cut to fit first
        (Ollama's and TEI's `truncate`); `dimensions`, each vector's first components only (Matryoshka);
        `unit`, then L2-normalized. `field`: what refusals of the inputs name."""
        embedder = await self.ready()
        check_dimensions(dimensions, embedder.n_embd)
        check_texts(inputs, embedder.config.max_inputs, field)
        tokens = await asyncio.to_thread(self._tokenize, embedder, inputs, cut)
        vectors, n_tokens = await pooled(self.ctx, embedder, tokens, request, api, field)
        if dimensions is not None:
            vectors = [v[:dimensions] for v in vectors]
        return ([normalize(v) for v in vectors] if unit else vectors), n_tokens

    @staticmethod
    def _tokenize(embedder: AsyncEmbedder, inputs: list[str | list[int]], cut: Cut | None) -> list[list[int]]:
        """Texts get the model's special tokens (BOS), as /tokenize with add_special; ids are used as is.
        `cut`: each input over its limit cut to fit, its special tokens kept."""
        tokens = [embedder.tokenize(x) if isinstance(x, str) else x for x in inputs]
        if cut is None:
            return tokens
        return cut_inputs(inputs, tokens, cut, lambda text: embedder.tokenize(text, add_special=False))
