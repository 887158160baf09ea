"""The retrieval workloads: ``embed`` (``POST /v1/embeddings``, N inputs a request) and ``rerank``
(``POST /v1/rerank``, one query and N documents a request, the Jina/Cohere shape llama-server serves).

The answer is one JSON body, not a stream: a request's figures are its end-to-end time, the inputs
(or documents) it carried and the prompt tokens the server's ``usage`` reports. Texts are runs of
words cut from the built-in prompts at distinct offsets, so requests do not repeat one another's
texts (no server caches embeddings today, but a benchmark should not lean on that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmhost.bench.load.workload import builtin_prompts
from llmhost.errors import LlmhostError

EMBED = "embed"
RERANK = "rerank"
KINDS = (EMBED, RERANK)
QUERY_WORDS = 12  # a rerank query: a search-box question, short beside its documents
STRIDE_WORDS = 37  # between consecutive texts' first words: coprime with typical lengths, so starts vary


class AnswerError(LlmhostError):
    """A 200 answer that is not what the route promises (``malformed_stream``, as a stream's would be)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.kind = "malformed_stream"
        self.detail = detail


@dataclass(frozen=True)
class Answer:
    items: int  # vectors or scores the answer carried
    prompt_tokens: int | None  # the server's usage, when it reports one


@dataclass(frozen=True)
class RetrievalTarget:
    """``/v1/embeddings`` or ``/v1/rerank`` on one server: the route, the body, the answer's reading."""

    kind: str
    model: str | None = None
    extra_headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown retrieval workload {self.kind!r}; choose one of {', '.join(KINDS)}")

    @property
    def path(self) -> str:
        return "/v1/embeddings" if self.kind == EMBED else "/v1/rerank"

    @property
    def noun(self) -> str:
        """What a request carries N of, in the figures' words."""
        return "inputs" if self.kind == EMBED else "documents"

    def headers(self) -> dict[str, str]:
        return {"Accept": "application/json", **dict(self.extra_headers)}

    def body(self, texts: list[str], query: str) -> dict[str, Any]:
        model = self.model or "default"
        if self.kind == EMBED:
            return {"model": model, "input": texts, "encoding_format": "float"}
        # top_n = every document: the server scores them all either way, and the answer's count checks it
        return {"model": model, "query": query, "documents": texts, "top_n": len(texts)}

    def read(self, raw: bytes, sent: int) -> Answer:
        """The answer to a request of ``sent`` texts; AnswerError when it is not one."""
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise AnswerError(f"answer is not JSON: {raw[:80]!r}") from exc
        key = "data" if self.kind == EMBED else "results"
        items = obj.get(key) if isinstance(obj, dict) else None
        if not isinstance(items, list):
            raise AnswerError(f"answer without a {key!r} list: {raw[:80]!r}")
        if len(items) != sent:
            raise AnswerError(f"{len(items)} {key} for {sent} {self.noun}")
        usage = obj.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return Answer(len(items), tokens if isinstance(tokens, int) else None)


@dataclass(frozen=True)
class RetrievalSettings:
    kind: str
    documents: int = 64  # inputs (embed) or documents (rerank) a request carries
    words: int = 100  # words of each
    distinct: int = 32  # distinct requests; a level sends them in turn

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"--workload: one of {', '.join(KINDS)}, got {self.kind!r}")
        for flag, value in (
            ("--documents", self.documents),
            ("--document-words", self.words),
            ("--num-prompts", self.distinct),
        ):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")


@dataclass(frozen=True)
class RetrievalRequest:
    query: str  # rerank's; unused by embed
    texts: list[str]


def _words() -> list[str]:
    return " ".join(text for text, _ in builtin_prompts()).split()


def _run_of(words: list[str], start: int, n: int) -> str:
    at = start % len(words)
    picked = words[at : at + n]
    while len(picked) < n:  # past the end: go on from the start
        picked += words[: n - len(picked)]
    return " ".join(picked)


def retrieval_requests(settings: RetrievalSettings) -> list[RetrievalRequest]:
    """``settings.distinct`` requests of ``settings.documents`` texts of ``settings.words`` words each,
    every text starting at a different word of the corpus."""
    words = _words()
    out: list[RetrievalRequest] = []
    text_no = 0
    for r in range(settings.distinct):
        texts = []
        for _ in range(settings.documents):
            texts.append(_run_of(words, text_no * STRIDE_WORDS, settings.words))
            text_no += 1
        # the query from the other end of the corpus, so it is not a copy of a document's first words
        query = _run_of(words, len(words) // 2 + r * STRIDE_WORDS, QUERY_WORDS)
        out.append(RetrievalRequest(query, texts))
    return out


def describe(settings: RetrievalSettings) -> dict[str, Any]:
    """The workload as the results record it."""
    noun = "inputs" if settings.kind == EMBED else "documents"
    out: dict[str, Any] = {
        "source": settings.kind,
        "requests": settings.distinct,
        f"{noun}_per_request": settings.documents,
        "words_per_text": settings.words,
    }
    if settings.kind == RERANK:
        out["query_words"] = QUERY_WORDS
    return out
