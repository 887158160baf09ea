"""`llmhost bench run --workload embed|rerank`: the texts, the bodies, the reading of the answers, the
options' checks, and a run against the fake server's /v1/embeddings and /v1/rerank."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from llmhost.bench.config import BenchConfig
from llmhost.bench.figures.saturation import SaturationRule
from llmhost.bench.load.retrieval import (
    QUERY_WORDS,
    AnswerError,
    RetrievalSettings,
    RetrievalTarget,
    retrieval_requests,
)
from llmhost.bench.runner import arun_benchmark
from tests.unit.bench.test_saturation import _lv

URL = "http://127.0.0.1:1"


def test_each_request_carries_its_count_of_texts_of_the_words_asked() -> None:
    reqs = retrieval_requests(RetrievalSettings("rerank", documents=5, words=30, distinct=4))
    assert len(reqs) == 4 and all(len(r.texts) == 5 for r in reqs)
    texts = [t for r in reqs for t in r.texts]
    assert all(len(t.split()) == 30 for t in texts)
    assert len(set(texts)) == len(texts)  # distinct starts: no text is sent twice in a round
    assert all(len(r.query.split()) == QUERY_WORDS for r in reqs)
    assert len({r.query for r in reqs}) == 4


def test_texts_longer_than_the_corpus_wrap_around_it() -> None:
    [req] = retrieval_requests(RetrievalSettings("embed", documents=1, words=5000, distinct=1))
    assert len(req.texts[0].split()) == 5000


def test_the_bodies_are_the_openai_and_jina_shapes() -> None:
    embed = RetrievalTarget("embed", model="m").body(["a", "b"], "q")
    assert embed == {"model": "m", "input": ["a", "b"], "encoding_format": "float"}
    rerank = RetrievalTarget("rerank").body(["a", "b"], "q")
    assert rerank == {"model": "default", "query": "q", "documents": ["a", "b"], "top_n": 2}
    assert RetrievalTarget("embed").path == "/v1/embeddings"
    assert RetrievalTarget("rerank").path == "/v1/rerank"
    with pytest.raises(ValueError, match="choose one of embed, rerank"):
        RetrievalTarget("generate")


def _answer(key: str, n: int, usage: Any = None) -> bytes:
    obj: dict[str, Any] = {key: [{"index": i} for i in range(n)]}
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj).encode()


def test_an_answer_gives_its_count_and_the_servers_tokens() -> None:
    read = RetrievalTarget("rerank").read(_answer("results", 3, {"prompt_tokens": 42}), 3)
    assert (read.items, read.prompt_tokens) == (3, 42)
    read = RetrievalTarget("embed").read(_answer("data", 2), 2)
    assert (read.items, read.prompt_tokens) == (2, None)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "without a 'results' list"),
        (_answer("data", 3), "without a 'results' list"),
        (_answer("results", 2), "2 results for 3 documents"),
    ],
)
def test_an_answer_that_is_not_one_is_an_error(raw: bytes, words: str) -> None:
    with pytest.raises(AnswerError, match=words) as err:
        RetrievalTarget("rerank").read(raw, 3)
    assert err.value.kind == "malformed_stream"


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"documents": 0}, "--documents must be at least 1"),
        ({"document_words": 0}, "--document-words must be at least 1"),
        ({"prompts_file": "p.jsonl"}, "--prompts-file does not apply to --workload rerank"),
        ({"model": "a,b"}, "applies to the prompts workload"),
    ],
)
def test_options_a_retrieval_workload_cannot_take_are_refused(given: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        BenchConfig(url=URL, workload="rerank", **given).validate()


def test_retrieval_levels_saturate_on_items_per_second() -> None:
    rule = SaturationRule(0.05)
    one, two = replace(_lv(1, 0, 1.0), items_per_s=100.0), replace(_lv(2, 0, 2.0), items_per_s=101.0)
    assert rule.check([one, two]) == "c=2: items/s +1.0% over c=1 (less than 5%) while p50 E2E +100.0%"
    assert rule.check([one, replace(two, items_per_s=190.0)]) is None


@pytest.mark.parametrize(("workload", "noun"), [("embed", "inputs"), ("rerank", "documents")])
async def test_a_run_counts_the_items_and_the_servers_tokens(fake_url: str, workload: str, noun: str) -> None:
    cfg = BenchConfig(
        url=fake_url,
        workload=workload,
        documents=4,
        document_words=10,
        concurrency=[1, 2],
        requests=6,
        num_prompts=3,
    )
    results = await arun_benchmark(cfg)
    [config] = results.configs
    assert config.workload[f"{noun}_per_request"] == 4 and config.params["model_name"] == "fake-model"
    query = QUERY_WORDS if workload == "rerank" else 0
    for lv in config.levels:
        assert lv.successes == lv.requests == 6 and lv.items == 24 and lv.output_tokens == 0
        assert lv.input_tokens == 6 * 4 * (10 + query)  # the fake's usage: one token per word
        assert lv.items_per_s == pytest.approx(24 / lv.wall_s)
        assert lv.get("e2e_s_p50") is not None and lv.get("e2e_s_p50") >= 0.05  # type: ignore[operator]
        assert lv.get("ttft_s_p50") is None  # one answer, no stream


async def test_a_short_answer_is_a_malformed_one(fake_url: str) -> None:
    cfg = BenchConfig(
        url=fake_url,
        workload="embed",
        documents=3,
        requests=2,
        headers={"X-Fake-Mode": "malformed"},
        max_error_rate=None,
    )
    [lv] = (await arun_benchmark(cfg)).levels()
    assert lv.successes == 0 and lv.errors == {"malformed_stream": 2}
