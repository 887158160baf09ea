"""The rerank and score APIs' answers over one reranker (serving/apis/rerank.py): Jina's and Cohere's
v1 (llama-server's and vLLM's `/v1/rerank`), Cohere's v2, TEI's `/rerank`, vLLM's `/score`. Scores are
the model's own (llama-server's) everywhere but TEI's, which passes a one-label head's logit through a
sigmoid unless `raw_scores`."""

from __future__ import annotations

import asyncio
import math
import time
import uuid

from starlette.requests import Request

from llmhost.server.protocol.rerank import (
    CohereRerankRequest,
    RerankRequest,
    ScoreRequest,
    TEIRerankRequest,
)
from llmhost.server.serving.apis.rerank import (
    RerankServing,
    document_text,
    ranked,
    sigmoid,
    usage,
)
from llmhost.server.serving.apis.truncation import Cut
from llmhost.shared.jsontypes import JSONObject, JSONValue
from llmhost.web.errors import APIError

RERANK = "rerank"
SCORE = "score"
# Cohere bills a search unit per 100 documents
_DOCS_PER_SEARCH_UNIT = 100


def _meta(n_docs: int, n_tokens: int) -> JSONObject:
    """Cohere's `meta`: its clients read the billed units and tokens."""
    units = math.ceil(n_docs / _DOCS_PER_SEARCH_UNIT)
    return {
        "api_version": {"version": "2"},
        "billed_units": {"search_units": units},
        "tokens": {"input_tokens": n_tokens},
    }


def _listed(texts: str | list[str] | None) -> list[str]:
    return [texts] if isinstance(texts, str) else (texts or [])


def score_pairs(body: ScoreRequest) -> list[tuple[str, str]]:
    """vLLM's pairs: one text_1 against each text_2, or two lists of one length pairwise."""
    if (body.text_1 is not None or body.text_2 is not None) and (
        body.queries is not None or body.documents is not None
    ):
        raise APIError(400, "give text_1 and text_2, or queries and documents, not both", field="text_1")
    left, right, names = body.text_1, body.text_2, ("text_1", "text_2")
    if left is None and right is None:
        left, right, names = body.queries, body.documents, ("queries", "documents")
    for value, name in zip((left, right), names, strict=True):
        if value is None or value == []:
            raise APIError(422, f"{name} is missing or empty", field=name, extra={"limit": 1})
    firsts, seconds = _listed(left), _listed(right)
    if len(firsts) == 1:
        return [(firsts[0], text) for text in seconds]
    if len(firsts) != len(seconds):
        raise APIError(
            400,
            f"{names[0]} has {len(firsts)} items and {names[1]} {len(seconds)}: give one {names[0]}, "
            f"or as many as {names[1]}",
            field=names[0],
        )
    return list(zip(firsts, seconds, strict=True))


class RerankAPIs:
    def __init__(self, core: RerankServing) -> None:
        self.core = core

    def _cut(self, truncate_prompt_tokens: int | None) -> Cut | None:
        """vLLM's truncate_prompt_tokens: None refuses a pair over the limit, -1 cuts to it, N to N tokens."""
        return None if truncate_prompt_tokens is None else self.core.cut_to(truncate_prompt_tokens)

    def _model(self, model: str | None) -> str:
        self.core.ctx.names.check(model)
        return model or self.core.ctx.settings.model_name

    async def rerank(self, body: RerankRequest, request: Request) -> JSONObject:
        """Jina's / Cohere's v1 / llama-server's / vLLM's answer."""
        model = self._model(body.model)
        texts = [document_text(doc, i, body.rank_fields) for i, doc in enumerate(body.documents)]
        pairs = [(body.query, text) for text in texts]
        scored = await self.core.score(pairs, request, RERANK, self._cut(body.truncate_prompt_tokens))
        results: list[JSONValue] = []
        for i in ranked(scored.values, body.top_n):
            item: JSONObject = {"index": i, "relevance_score": scored.values[i]}
            if body.return_documents:
                item["document"] = {"text": texts[i]}
            results.append(item)
        return {
            "id": f"rerank-{uuid.uuid4().hex}",
            "model": model,
            "object": "list",
            "results": results,
            "usage": usage(scored.n_tokens),
            "meta": _meta(len(pairs), scored.n_tokens),
        }

    async def cohere(self, body: CohereRerankRequest, request: Request) -> JSONObject:
        """Cohere's v2: documents cut to max_tokens_per_doc, and pairs to the limit (Cohere truncates)."""
        model = self._model(body.model)
        self.core.reranker()  # the model's refusal first, before any tokenizing
        docs = await asyncio.to_thread(self._at_most, body.documents, body.max_tokens_per_doc)
        scored = await self.core.score(
            [(body.query, doc) for doc in docs], request, RERANK, self.core.cut_to()
        )
        results: list[JSONValue] = [
            {"index": i, "relevance_score": scored.values[i]} for i in ranked(scored.values, body.top_n)
        ]
        return {
            "id": f"rerank-{uuid.uuid4().hex}",
            "model": model,
            "results": results,
            "meta": _meta(len(docs), scored.n_tokens),
            "usage": usage(scored.n_tokens),
        }

    def _at_most(self, texts: list[str], n_tokens: int) -> list[str]:
        """Each text cut to its first `n_tokens` tokens."""
        reranker = self.core.reranker()
        out = []
        for text in texts:
            tokens = reranker.tokenize(text, add_special=False)
            out.append(text if len(tokens) <= n_tokens else reranker.detokenize(tokens[:n_tokens]))
        return out

    async def tei(self, body: TEIRerankRequest, request: Request) -> list[JSONObject]:
        """TEI's: a list of {index, score[, text]}, best first."""
        cut = self.core.cut_to(direction=body.truncation_direction) if body.truncate else None
        scored = await self.core.score(
            [(body.query, text) for text in body.texts], request, RERANK, cut, field="texts"
        )
        logits = self.core.reranker().score_labels == 1
        out: list[JSONObject] = []
        for i in ranked(scored.values, None):
            score = scored.values[i]
            item: JSONObject = {
                "index": i,
                "score": sigmoid(score) if logits and not body.raw_scores else score,
            }
            if body.return_text:
                item["text"] = body.texts[i]
            out.append(item)
        return out

    async def score(self, body: ScoreRequest, request: Request) -> JSONObject:
        """vLLM's: a score a pair, in the pairs' order."""
        model = self._model(body.model)
        pairs = score_pairs(body)
        field = "text_2" if body.text_2 is not None else "documents"
        scored = await self.core.score(pairs, request, SCORE, self._cut(body.truncate_prompt_tokens), field)
        data: list[JSONValue] = [
            {"index": i, "object": "score", "score": value} for i, value in enumerate(scored.values)
        ]
        return {
            "id": f"score-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": model,
            "data": data,
            "usage": usage(scored.n_tokens),
        }
