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

from llmhost.engine.embedder_loop import AsyncEmbedder
from llmhost.engine.llamacpp.rerank_prompt import PairTooLongError
from llmhost.server.protocol.rerank import Document
from llmhost.server.serving.apis.embeddings import check_count, pooled
from llmhost.server.serving.apis.truncation import Cut, Direction
from llmhost.server.serving.context import ServingContext
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

Pair = tuple[str, str]


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

    def cut_to(self, n_tokens: int | None = None, direction: Direction = "Right") -> Cut:
        """Pairs cut to `n_tokens` (the server's max_input_tokens where None, below 1, or above it),
        their document's end dropped (Right) or its start (Left)."""
        most = self.reranker().config.max_input_tokens
        return Cut(n_tokens if n_tokens is not None and 0 < n_tokens < most else most, direction)

    async def score(
        self, pairs: Sequence[Pair], request: Request, api: str, cut: Cut | None, field: str = "documents"
    ) -> Scores:
        """The scores of `pairs`: a pair over the limit cut to `cut`, or refused where it is None
        (`field`: the request's name for what is ranked, named by refusals)."""
        reranker = self.reranker()
        check_count(len(pairs), reranker.config.max_inputs, field)
        tokens = await asyncio.to_thread(self._tokenize, reranker, pairs, cut, field)
        vectors, n_tokens = await pooled(self.ctx, reranker, tokens, request, api, field, "reranking")
        return Scores([float(v[0]) for v in vectors], n_tokens)

    @staticmethod
    def _tokenize(
        reranker: AsyncEmbedder, pairs: Sequence[Pair], cut: Cut | None, field: str
    ) -> list[list[int]]:
        limit = cut.limit if cut is not None else 0
        keep_end = cut is not None and cut.direction == "Left"
        out = []
        for i, (query, doc) in enumerate(pairs):
            try:
                out.append(reranker.pair_tokens(query, doc, cut is not None, limit, keep_end))
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


def usage(n_tokens: int) -> JSONObject:
    return {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
