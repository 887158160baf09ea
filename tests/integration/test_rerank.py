"""Rerankers served by `llmhost serve` with no flag (the GGUF's pooling type rank decides): every
rerank and score route, the cohere client unchanged, the refusals. Tiny random-weight rerankers: a BERT
cross-encoder and a Qwen3-Reranker-style causal model with a rerank prompt template. Their scores equal
llama-server's `--rerank` (`-fa off`) on the same files: benchmarks/retrieval.py checks that."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import cohere
import httpx
import pytest

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.endpoint_helpers import start_endpoint, stop_endpoint
from tests.tinymodels import build_tiny_gguf

QUERY = "what is a cat"
DOCS = ["a cat is an animal", "stocks fell today", "x", "cats purr and sleep a lot"]
RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements.<|im_end|>\n"
    "<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n"
)
MAX_INPUT_TOKENS = 64


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("rerankers")
    return {
        "bert": build_tiny_gguf(d / "bert-rerank.gguf", arch="bert", reranker=True),
        "qwen3": build_tiny_gguf(
            d / "qwen3-rerank.gguf", arch="qwen3", reranker=True, rerank_template=RERANK_TEMPLATE
        ),
    }


@pytest.fixture(scope="module")
def bert(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("bert"),
        str(files["bert"]),
        "--served-model-name",
        "tiny-rerank",
        "--max-input-tokens",
        str(MAX_INPUT_TOKENS),
        # without flash attention a pair's score does not depend on what it is decoded with
        "--no-flash-attn",
    )
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def qwen3(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("qwen3"), str(files["qwen3"]))
    yield srv
    stop_server(srv)


def post(server: Server, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def scores_by_index(server: Server) -> dict[int, float]:
    r = post(server, "/v1/rerank", {"query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    return {item["index"]: item["relevance_score"] for item in r.json()["results"]}


def test_a_rerank_answer_is_sorted_with_usage_and_each_score_is_the_pair_alone(bert: Server) -> None:
    r = post(bert, "/v1/rerank", {"model": "tiny-rerank", "query": QUERY, "documents": DOCS, "top_n": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "tiny-rerank" and body["object"] == "list"
    results = body["results"]
    assert len(results) == 3
    values = [item["relevance_score"] for item in results]
    assert values == sorted(values, reverse=True)
    assert "document" not in results[0]
    # the tokens llama-server counts: BOS query EOS SEP document EOS, per pair
    tokens = [
        len(post(bert, "/tokenize", {"content": text, "add_special": False}).json()["tokens"])
        for text in (QUERY, *DOCS)
    ]
    assert body["usage"]["prompt_tokens"] == sum(tokens[0] + n + 4 for n in tokens[1:])
    # each pair scored in a request of its own: the same score as batched with the others
    batched = scores_by_index(bert)
    for i, doc in enumerate(DOCS):
        alone = post(bert, "/v1/rerank", {"query": QUERY, "documents": [doc]}).json()["results"][0]
        assert alone["relevance_score"] == pytest.approx(batched[i], abs=1e-5)


def test_every_route_gives_the_same_scores(bert: Server) -> None:
    expected = scores_by_index(bert)
    # llama-server's aliases and /rerank in Jina's shape, documents as objects, returned
    for path in ("/rerank", "/v1/reranking", "/reranking"):
        r = post(
            bert, path, {"query": QUERY, "documents": [{"text": d} for d in DOCS], "return_documents": True}
        )
        assert r.status_code == 200, (path, r.text)
        for item in r.json()["results"]:
            assert item["relevance_score"] == pytest.approx(expected[item["index"]], abs=1e-6)
            assert item["document"] == {"text": DOCS[item["index"]]}
    # TEI's /rerank: raw scores are the model's, else through a sigmoid (a one-label head)
    raw = post(
        bert, "/rerank", {"query": QUERY, "texts": DOCS, "raw_scores": True, "return_text": True}
    ).json()
    assert [item["index"] for item in raw] == sorted(expected, key=lambda i: -expected[i])
    for item in raw:
        assert item["score"] == pytest.approx(expected[item["index"]], abs=1e-6)
        assert item["text"] == DOCS[item["index"]]
    for item in post(bert, "/rerank", {"query": QUERY, "texts": DOCS}).json():
        assert item["score"] == pytest.approx(1 / (1 + math.exp(-expected[item["index"]])), abs=1e-6)
        assert "text" not in item
    # vLLM's /score: text_1 against each text_2, in order; queries/documents the same
    for path, body in (
        ("/v1/score", {"text_1": QUERY, "text_2": DOCS}),
        ("/score", {"queries": QUERY, "documents": DOCS}),
        ("/score", {"text_1": [QUERY] * len(DOCS), "text_2": DOCS}),
    ):
        r = post(bert, path, body)
        assert r.status_code == 200, r.text
        data = r.json()["data"]
        assert [d["index"] for d in data] == list(range(len(DOCS)))
        assert [d["score"] for d in data] == pytest.approx([expected[i] for i in range(len(DOCS))], abs=1e-6)


def test_the_cohere_client_unchanged(bert: Server) -> None:
    expected = scores_by_index(bert)
    v2 = cohere.ClientV2(api_key="unused", base_url=bert.url)
    answer = v2.rerank(model="tiny-rerank", query=QUERY, documents=DOCS, top_n=2)
    assert [r.index for r in answer.results] == sorted(expected, key=lambda i: -expected[i])[:2]
    for result in answer.results:
        assert result.relevance_score == pytest.approx(expected[result.index], abs=1e-6)
    assert answer.meta is not None and answer.meta.billed_units is not None
    v1 = cohere.Client(api_key="unused", base_url=bert.url)
    old = v1.rerank(
        query=QUERY,
        documents=[{"title": str(i), "body": d} for i, d in enumerate(DOCS)],
        rank_fields=["body"],
        return_documents=True,
    )
    assert len(old.results) == len(DOCS)
    assert old.results[0].document is not None
    assert old.results[0].document.text == "body: " + DOCS[old.results[0].index]


def test_too_long_pairs_are_refused_or_cut_as_asked(bert: Server) -> None:
    long_doc = "the cat " * 100
    r = post(bert, "/v1/rerank", {"query": QUERY, "documents": ["short", long_doc]})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["field"] == "documents" and err["index"] == 1 and err["limit"] == MAX_INPUT_TOKENS
    cut = post(bert, "/v1/rerank", {"query": QUERY, "documents": [long_doc], "truncate_prompt_tokens": -1})
    assert cut.status_code == 200 and cut.json()["usage"]["prompt_tokens"] == MAX_INPUT_TOKENS
    tei = post(bert, "/rerank", {"query": QUERY, "texts": [long_doc]})
    assert tei.status_code == 422 and tei.json()["error"]["field"] == "texts"
    # the document's start is what is kept (Right), or its end (Left): different pairs, both scored
    right = post(
        bert, "/rerank", {"query": QUERY, "texts": ["x " + long_doc], "truncate": True, "raw_scores": True}
    )
    left = post(
        bert,
        "/rerank",
        {
            "query": QUERY,
            "texts": ["x " + long_doc],
            "truncate": True,
            "truncation_direction": "Left",
            "raw_scores": True,
        },
    )
    assert right.status_code == left.status_code == 200
    assert right.json()[0]["score"] != left.json()[0]["score"]
    # Cohere v2 cuts documents to max_tokens_per_doc, then the pair to the limit
    v2 = post(bert, "/v2/rerank", {"query": QUERY, "documents": [long_doc, "x"], "max_tokens_per_doc": 8})
    assert v2.status_code == 200, v2.text


def test_refusals_name_the_field(bert: Server) -> None:
    cases = [
        ("/v1/rerank", {"query": QUERY, "documents": []}, 422, "documents"),
        ("/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 0}, 422, "top_n"),
        ("/v1/rerank", {"query": QUERY, "documents": [{"title": "t"}]}, 422, "documents"),
        ("/v1/rerank", {"query": QUERY, "documents": DOCS, "unknown": 1}, 400, "unknown"),
        ("/v1/rerank", {"documents": DOCS}, 422, "query"),
        ("/score", {"text_1": ["a", "b"], "text_2": ["a", "b", "c"]}, 400, "text_1"),
        ("/score", {"text_1": "a"}, 422, "text_2"),
        ("/v2/rerank", {"query": QUERY, "documents": DOCS, "priority": 1}, 400, "priority"),
        ("/v1/embeddings", {"input": "a cat"}, 400, None),
    ]
    for path, body, status, field in cases:
        r = post(bert, path, body)
        assert r.status_code == status, (path, body, r.text)
        if field is not None:
            assert field in r.text, (path, r.text)


def test_a_causal_reranker_with_a_rerank_template(qwen3: Server) -> None:
    """Qwen3-Reranker's form: the GGUF's rerank prompt, the last token's yes/no head softmaxed by
    llama.cpp: scores are probabilities, which TEI's route leaves as they are."""
    expected = scores_by_index(qwen3)
    assert all(0.0 < s < 1.0 for s in expected.values())
    tei = post(qwen3, "/rerank", {"query": QUERY, "texts": DOCS}).json()
    for item in tei:
        assert item["score"] == pytest.approx(expected[item["index"]], abs=1e-6)
    prompt = RERANK_TEMPLATE.replace("{query}", QUERY).replace("{document}", DOCS[0])
    n = len(
        post(qwen3, "/tokenize", {"content": prompt, "add_special": False, "parse_special": True}).json()[
            "tokens"
        ]
    )
    one = post(qwen3, "/v1/rerank", {"query": QUERY, "documents": [DOCS[0]]}).json()
    assert one["usage"]["prompt_tokens"] == n


def test_a_generation_model_does_not_rerank(server: Server) -> None:
    r = post(server, "/v1/rerank", {"query": QUERY, "documents": DOCS})
    assert r.status_code == 400
    assert "does not rerank" in r.json()["error"]["message"]


def test_an_endpoint_routes_rerank_and_score_by_model(
    files: dict[str, Path], bert: Server, qwen3: Server, tmp_path: Path
) -> None:
    """Two reranker components (no flag: the GGUF decides); the router picks each by `model`."""
    yaml_text = f"""
name: rerankers
components:
  - name: bert
    model: {files["bert"]}
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 300}}
    engine: {{max_input_tokens: {MAX_INPUT_TOKENS}}}
  - name: qwen3
    model: {files["qwen3"]}
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 300}}
"""
    ep = start_endpoint(tmp_path, yaml_text)
    try:
        client = cohere.ClientV2(api_key="unused", base_url=ep.url)
        answers = {name: client.rerank(model=name, query=QUERY, documents=DOCS) for name in ("bert", "qwen3")}
        scored = httpx.post(
            f"{ep.url}/v1/score", json={"model": "qwen3", "text_1": QUERY, "text_2": DOCS}, timeout=60
        )
    finally:
        stop_endpoint(ep)
    # the qwen3 copy runs as the qwen3 server does (flash attention on): the same scores
    direct = scores_by_index(qwen3)
    for result in answers["qwen3"].results:
        assert result.relevance_score == pytest.approx(direct[result.index], abs=1e-6)
    # the bert copy is BERT's (logits, not qwen3's probabilities), with flash attention on where the
    # bert server has it off: the same scores to what batching with flash attention moves them
    direct = scores_by_index(bert)
    for result in answers["bert"].results:
        assert result.relevance_score == pytest.approx(direct[result.index], abs=3e-2)
    assert min(r.relevance_score for r in answers["bert"].results) < 0
    assert scored.status_code == 200, scored.text
    qwen3_direct = scores_by_index(qwen3)
    assert [d["score"] for d in scored.json()["data"]] == pytest.approx(
        [qwen3_direct[i] for i in range(len(DOCS))]
    )


def test_sagemaker_invocations_on_a_reranker_in_tei_shape(bert: Server) -> None:
    expected = scores_by_index(bert)
    r = post(bert, "/invocations", {"query": QUERY, "texts": DOCS, "raw_scores": True})
    assert r.status_code == 200, r.text
    for item in r.json():
        assert item["score"] == pytest.approx(expected[item["index"]], abs=1e-6)
    jina = post(bert, "/invocations", {"query": QUERY, "documents": DOCS, "top_n": 1}).json()
    assert jina["results"][0]["relevance_score"] == pytest.approx(max(expected.values()), abs=1e-6)
