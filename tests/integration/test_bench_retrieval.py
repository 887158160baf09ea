"""`llmhost bench run --workload embed|rerank` end to end against a real `llmhost serve` of a tiny BERT
embedder (no flag: its GGUF's mean pooling makes it an embeddings server) and a tiny BERT cross-encoder
(`--embeddings --pooling rank`, the flags that make any model with a classification head a reranker)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Server, start_server, stop_server
from tests.tinymodels import build_tiny_gguf

DOCUMENTS = 8
WORDS = 40
REQUESTS = 4


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("bench-embed")
    srv = start_server(tmp, str(build_tiny_gguf(tmp / "bert.gguf", arch="bert")))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("bench-rerank")
    model = build_tiny_gguf(tmp / "rerank.gguf", arch="bert", reranker=True)
    srv = start_server(tmp, str(model), "--embeddings", "--pooling", "rank")
    yield srv
    stop_server(srv)


def bench(url: str, workload: str, out: Path) -> dict[str, object]:
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "bench",
        "run",
        "--url",
        url,
        "--workload",
        workload,
        "--documents",
        str(DOCUMENTS),
        "--document-words",
        str(WORDS),
        "--concurrency",
        "1,2",
        "--requests",
        str(REQUESTS),
        "--out",
        str(out),
        "--no-live",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Retrieval" in done.stdout  # the table of items/s and latency
    summary = json.loads((out / "summary.json").read_text())
    [config] = summary["configs"]
    return dict(config)


def check_levels(config: dict[str, object]) -> None:
    levels = config["levels"]
    assert isinstance(levels, list) and [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["successes"] == lv["requests"] == REQUESTS and lv["errors"] == {}
        assert lv["items"] == REQUESTS * DOCUMENTS and lv["items_per_s"] > 0
        # the server's usage: every text's tokens (SmolLM2's BPE gives a word one token or more)
        assert lv["input_tokens"] >= REQUESTS * DOCUMENTS * WORDS
        assert lv["distributions"]["e2e_s_p50"] > 0 and lv["distributions"]["e2e_s_p90"] > 0


def test_bench_embed_against_llmhost_serve(embedder: Server, tmp_path: Path) -> None:
    config = bench(embedder.url, "embed", tmp_path / "embed")
    assert config["workload"] == {
        "source": "embed",
        "requests": 32,
        "inputs_per_request": DOCUMENTS,
        "words_per_text": WORDS,
    }
    check_levels(config)


# strict: passes, and so fails here, once POST /v1/rerank is served; then drop the mark
def test_bench_rerank_against_llmhost_serve(reranker: Server, tmp_path: Path) -> None:
    config = bench(reranker.url, "rerank", tmp_path / "rerank")
    assert config["workload"]["documents_per_request"] == DOCUMENTS  # type: ignore[index]
    check_levels(config)
