"""Reranking over a reranker's embedder: each (query, document) pair written as llama-server writes it
(see engine/llamacpp/rerank_prompt.py), the pairs of every queued request packed into shared decodes,
and each pair's score the first value its classification head gives (llama-server's `embd[0]`). The
rerank and score APIs differ only in their shapes (server/routes/rerank.py)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request

from llmhost.engine.embedder import EmbeddingError
from llmhost.engine.embedder_loop import AsyncEmbedder
from llmhost.engine.llamacpp.rerank_prompt import PairTooLongError
from llmhost.engine.request import EngineError
from llmhost.server.errors import from_engine
from llmhost.server.protocol.rerank import Document
from llmhost.server.serving.apis.embeddings import until_done
from llmhost.server.serving.context import ServingContext
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

Pair = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Cut:
    """What to do with a pair longer than the limit: cut its document to fit (`keep_end`: keeping the
    document's end) or refuse it; `limit`: tokens a pair may have (0: the server's max_input_tokens)."""

    allowed: bool = False
    limit: int = 0
    keep_end: bool = False


@dataclass(frozen=True, slots=True)
class Scores:
    values: list[float]  # one a pair, in the pairs' order
    n_tokens: int  # the pairs' tokens in all


def sigmoid(score: float) -> float:
    """TEI's scores of a one-label head (a logit); a head of more labels gives a probability already."""
    return 1.0 / (1.0 + math.exp(-score)) if score >= 0 else math.exp(score) / (1.0 + math.exp(score))


def document_text(doc: Document, index: int, rank_fields: Sequence[str] | None) -> str:
    """A document's text: a string, an object's `text`, or (Cohere v1's rank_fields) its fields named
    there, one `name: value` line each."""
    if isinstance(doc, str):
        return doc
    if rank_fields:
        missing = [name for name in rank_fields if name not in doc]
        if missing:
            raise APIError(
                422,
                f"documents[{index}] has no field {missing[0]!r} of rank_fields",
                field="documents",
                extra={"index": index},
            )
        return "\n".join(f"{name}: {doc[name]}" for name in rank_fields)
    if "text" not in doc:
        raise APIError(
            422,
            f"documents[{index}] is an object without `text` (name its fields in rank_fields)",
            field="documents",
            extra={"index": index},
        )
    return doc["text"]


class RerankServing:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx

    def reranker(self) -> AsyncEmbedder:
        """The reranker; a 400 when the model is none (a generation or embedding model), 503 while
        loading."""
        embedder = self.ctx.embedder
        if embedder is None:
            raise APIError(
                400,
                "this model generates text and does not rerank: serve a reranker (a GGUF of pooling type "
                "rank), or this model with --embeddings --pooling rank if it has a classification head",
            )
        self.ctx.require_model()
        if embedder.pooling != "rank":
            raise APIError(
                400,
                f"this model gives embeddings ({embedder.pooling} pooling) and does not rerank: serve a "
                "reranker (a GGUF of pooling type rank), or this one with --pooling rank if it has a "
                "classification head",
            )
        return embedder

    async def score(
        self, pairs: Sequence[Pair], request: Request, api: str, cut: Cut, field: str = "documents"
    ) -> Scores:
        """The scores of `pairs` (`field`: the request's name for what is ranked, named by refusals)."""
        reranker = self.reranker()
        if not pairs:
            raise APIError(422, f"{field} is empty: give at least one", field=field, extra={"limit": 1})
        most = reranker.config.max_inputs
        if len(pairs) > most:
            raise APIError(
                422,
                f"{field} has {len(pairs)} items; at most {most} are allowed per request",
                field=field,
                extra={"value": len(pairs), "limit": most},
            )
        tokens = await asyncio.to_thread(self._tokenize, reranker, pairs, cut, field)
        try:
            vectors = await until_done(reranker.embed(tokens), request)
        except EngineError as exc:
            err = from_engine(exc)
            self.ctx.metrics.rejected.labels(reason=str(err.status)).inc()
            raise err from exc
        except EmbeddingError as exc:
            raise APIError(exc.status, f"reranking failed: {exc}", "server_error") from exc
        n_tokens = sum(len(t) for t in tokens)
        self.ctx.metrics.count(api, "stop")
        self.ctx.metrics.prompt_tokens.inc(n_tokens)
        return Scores([float(v[0]) for v in vectors], n_tokens)

    @staticmethod
    def _tokenize(reranker: AsyncEmbedder, pairs: Sequence[Pair], cut: Cut, field: str) -> list[list[int]]:
        out = []
        for i, (query, doc) in enumerate(pairs):
            try:
                out.append(reranker.pair_tokens(query, doc, cut.allowed, cut.limit, cut.keep_end))
            except PairTooLongError as exc:
                raise APIError(
                    422,
                    f"{field}[{i}] with the query is {exc.n_tokens} tokens; the limit is {exc.limit} "
                    "(max_input_tokens): shorten it, or ask for it to be truncated",
                    field=field,
                    extra={"index": i, "value": exc.n_tokens, "limit": exc.limit},
                ) from None
        return out


def ranked(scores: Sequence[float], top_n: int | None) -> list[int]:
    """Indexes by score, best first (ties in the documents' order), the first `top_n`."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return order[:top_n] if top_n is not None else order


def tokens_cut(truncate_prompt_tokens: int | None) -> Cut:
    """vLLM's truncate_prompt_tokens: None refuses a pair over the limit, -1 cuts to it, N to N tokens."""
    if truncate_prompt_tokens is None:
        return Cut()
    return Cut(allowed=True, limit=max(truncate_prompt_tokens, 0))


def usage(n_tokens: int) -> JSONObject:
    return {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
