"""`llmhost serve --embeddings` with the official openai client, directly and through `llmhost endpoint`."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.endpoint_helpers import start_endpoint, stop_endpoint
from tests.sdk_errors import sent_error

MODEL = "gemma-embed"
MAX_INPUT_TOKENS = 48
N_EMBD = 640  # Gemma 3 270M
TEXTS = [
    "The cat sat on the mat.",
    "A kitten was sitting on the rug.",
    "Quarterly interest rates rose again at the central bank.",
]


@pytest.fixture(scope="module")
def emb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("embed"),
        "--embeddings",
        "--served-model-name",
        MODEL,
        "--max-input-tokens",
        str(MAX_INPUT_TOKENS),
        "--max-batch-tokens",
        "128",
    )
    yield srv
    stop_server(srv)


@pytest.fixture()
def oai(emb: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{emb.url}/v1", api_key="unused", timeout=120)


def vectors(response: Any) -> list[np.ndarray]:
    return [np.asarray(d.embedding, dtype=np.float64) for d in response.data]


def tokenize(server: Server, text: str) -> list[int]:
    r = httpx.post(f"{server.url}/tokenize", json={"content": text, "add_special": True}, timeout=30)
    return list(r.json()["tokens"])


def test_ping_was_503_while_the_model_loaded(emb: Server) -> None:
    assert emb.startup_pings and set(emb.startup_pings) == {503}
    assert httpx.get(f"{emb.url}/ping", timeout=10).status_code == 200
    assert httpx.get(f"{emb.url}/health", timeout=10).json()["status"] == "ready"


def test_a_list_gives_each_input_the_vector_it_gets_alone(oai: openai.OpenAI, emb: Server) -> None:
    batch = oai.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert batch.model == MODEL and batch.object == "list"
    assert [d.index for d in batch.data] == [0, 1, 2]
    together = vectors(batch)
    for text, vector in zip(TEXTS, together, strict=True):
        alone = vectors(oai.embeddings.create(model=MODEL, input=text, encoding_format="float"))[0]
        assert vector.shape == (N_EMBD,)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-4)
        assert np.abs(alone - vector).max() < 1e-4
    counts = [len(tokenize(emb, t)) for t in TEXTS]
    assert batch.usage.prompt_tokens == batch.usage.total_tokens == sum(counts)
    cat, kitten, rates = together
    assert cat @ kitten > cat @ rates and cat @ kitten > kitten @ rates


def test_token_ids_and_base64_match_the_text(oai: openai.OpenAI, emb: Server) -> None:
    ids = tokenize(emb, TEXTS[0])
    by_text = vectors(oai.embeddings.create(model=MODEL, input=TEXTS[0], encoding_format="float"))[0]
    # no encoding_format: the openai client asks for base64 and decodes it itself
    by_ids = oai.embeddings.create(model=MODEL, input=ids)
    assert np.abs(vectors(by_ids)[0] - by_text).max() < 1e-6
    assert by_ids.usage.prompt_tokens == len(ids)
    lists = oai.embeddings.create(model=MODEL, input=[ids, ids[:3]])
    assert len(lists.data) == 2 and lists.usage.prompt_tokens == len(ids) + 3
    raw = httpx.post(f"{emb.url}/v1/embeddings", json={"input": ids, "encoding_format": "base64"}, timeout=60)
    decoded = np.frombuffer(base64.b64decode(raw.json()["data"][0]["embedding"]), dtype="<f4")
    assert np.abs(decoded - by_text).max() < 1e-6
    native = oai.embeddings.create(model=MODEL, input=ids, dimensions=N_EMBD)
    assert len(native.data[0].embedding) == N_EMBD


@pytest.mark.parametrize(
    ("body", "status", "field", "limit"),
    [
        ({"input": ""}, 422, "input", 1),
        ({"input": []}, 422, "input", 1),
        ({"input": ["fine", ""]}, 422, "input", 1),
        ({"input": "word " * 200}, 422, "input", MAX_INPUT_TOKENS),
        ({"input": [[1, 2]] * 2049}, 422, "input", 2048),
        ({"input": [2, 262144]}, 422, "input", 262143),
        ({"input": [1, "a"]}, 422, "input", None),
        ({"input": "x", "dimensions": 64}, 400, "dimensions", None),
        ({"input": "x", "encoding_format": "int8"}, 422, "encoding_format", None),
        ({"input": "x", "truncate": True}, 400, "truncate", None),
    ],
)
def test_refusals_name_the_field_and_the_limit(
    emb: Server, body: dict[str, Any], status: int, field: str, limit: int | None
) -> None:
    r = httpx.post(f"{emb.url}/v1/embeddings", json=body, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["field"] == field and field in error["message"]
    assert error.get("limit") == limit


def test_invocations_answers_an_embeddings_body(emb: Server) -> None:
    body = {"input": ["Hello"], "encoding_format": "float"}
    r = httpx.post(f"{emb.url}/invocations", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == N_EMBD


def test_generation_is_refused_in_embeddings_mode(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai.completions.create(model=MODEL, prompt="Hello", max_tokens=2)
    assert "--embeddings" in sent_error(err.value)["message"]
    with pytest.raises(openai.BadRequestError) as err:
        oai.embeddings.create(model=MODEL, input="x", dimensions=8)
    assert sent_error(err.value)["param"] == "dimensions"


def test_a_server_without_embeddings_refuses_them(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/embeddings", json={"input": "hi"}, timeout=30)
    assert r.status_code == 400
    assert "not started with --embeddings" in r.json()["error"]["message"]


def test_embeddings_through_an_endpoint(tmp_path: Path, oai: openai.OpenAI) -> None:
    yaml_text = f"""
name: emb
components:
  - name: embedder
    copies: 1
    embeddings: true
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {{max_input_tokens: {MAX_INPUT_TOKENS}, max_batch_tokens: 128}}
    startup_health_check_timeout_s: 90
"""
    ep = start_endpoint(tmp_path, yaml_text)
    try:
        client = openai.OpenAI(base_url=f"{ep.url}/v1", api_key="unused", timeout=120)
        via_endpoint = client.embeddings.create(model="embedder", input=TEXTS[0])
    finally:
        stop_endpoint(ep)
    assert via_endpoint.model == "embedder"
    direct = vectors(oai.embeddings.create(model=MODEL, input=TEXTS[0]))[0]
    assert np.abs(vectors(via_endpoint)[0] - direct).max() < 1e-4
