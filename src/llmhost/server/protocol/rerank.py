"""The rerank and score APIs' requests and answers: Jina's and Cohere's v1 `/v1/rerank` (llama-server's
and vLLM's too), Cohere's `/v2/rerank`, TEI's `/rerank`, vLLM's `/score`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictInt, StrictStr

from llmhost.server.protocol.openai import Strict
from llmhost.server.protocol.outputs import Open
from llmhost.shared.jsontypes import JSONObject

# Cohere's default for /v2/rerank: longer documents are cut to this many tokens
COHERE_MAX_TOKENS_PER_DOC = 4096
# Cohere's bound on documents a request
MAX_DOCUMENTS = 10_000

# a document: its text, or (Jina, Cohere v1) an object with a `text` or the fields `rank_fields` names
Document = StrictStr | dict[str, StrictStr]
TopN = Annotated[StrictInt, Field(ge=1)]
# vLLM's: tokens each pair is cut to (-1: the model's limit)
TruncateTokens = Annotated[StrictInt, Field(ge=-1)]


class RerankRequest(Strict):
    """Jina's, Cohere's v1, llama-server's and vLLM's rerank."""

    model: str | None = None
    query: StrictStr
    documents: Annotated[list[Document], Field(max_length=MAX_DOCUMENTS)]
    top_n: TopN | None = None
    return_documents: bool = False
    rank_fields: list[StrictStr] | None = None  # Cohere v1: the fields of object documents to rank on
    truncate_prompt_tokens: TruncateTokens | None = None


class CohereRerankRequest(Strict):
    """Cohere's v2 rerank (`cohere.ClientV2.rerank`)."""

    model: str | None = None
    query: StrictStr
    documents: Annotated[list[StrictStr], Field(max_length=MAX_DOCUMENTS)]
    top_n: TopN | None = None
    max_tokens_per_doc: Annotated[StrictInt, Field(ge=1)] = COHERE_MAX_TOKENS_PER_DOC


class TEIRerankRequest(Strict):
    """TEI's rerank: scores through a sigmoid unless `raw_scores`."""

    query: StrictStr
    texts: Annotated[list[StrictStr], Field(max_length=MAX_DOCUMENTS)]
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool = False
    truncation_direction: Literal["Left", "Right"] = "Right"


class ScoreRequest(Strict):
    """vLLM's score: `text_1` against each of `text_2` (or pairwise, two lists of one length);
    `queries` / `documents` are the same by vLLM's newer names."""

    model: str | None = None
    text_1: StrictStr | list[StrictStr] | None = None
    text_2: StrictStr | list[StrictStr] | None = None
    queries: StrictStr | list[StrictStr] | None = None
    documents: StrictStr | list[StrictStr] | None = None
    truncate_prompt_tokens: TruncateTokens | None = None


# -- answers ---------------------------------------------------------------------------------------------
class RerankDocument(Open):
    text: str


class RerankResult(Open):
    index: int
    relevance_score: float
    document: RerankDocument | None = None  # with return_documents


class RerankResponse(Open):
    """Jina's and llama-server's keys (`model`, `usage`) with Cohere's (`id`, `meta`)."""

    id: str
    model: str
    object: Literal["list"]
    results: list[RerankResult]
    usage: dict[str, int]
    meta: JSONObject


class TEIRank(Open):
    index: int
    score: float
    text: str | None = None  # with return_text


class ScoreData(Open):
    index: int
    object: Literal["score"]
    score: float


class ScoreResponse(Open):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[ScoreData]
    usage: dict[str, int]
