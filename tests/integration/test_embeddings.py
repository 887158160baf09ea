"""`llmhost serve --embeddings` with the official openai client, directly and through `llmhost endpoint`;
a generation server's embeddings (its side embedder) with the openai and ollama clients; TEI's /embed."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import ollama
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
        ({"input": "x", "dimensions": N_EMBD + 1}, 400, "dimensions", N_EMBD),
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
    # TEI's SageMaker container: `inputs` on an embeddings server is its /embed, answered and refused
    # in TEI's shapes
    tei = httpx.post(f"{emb.url}/invocations", json={"inputs": ["Hello"]}, timeout=60)
    assert tei.status_code == 200, tei.text
    direct = httpx.post(f"{emb.url}/embed", json={"inputs": ["Hello"]}, timeout=60).json()
    assert np.abs(np.asarray(tei.json()) - np.asarray(direct)).max() < 1e-6
    bad = httpx.post(f"{emb.url}/invocations", json={"inputs": "x", "prompt_name": "query"}, timeout=60)
    assert bad.status_code == 422 and bad.json()["error_type"] == "Validation"


def test_generation_is_refused_in_embeddings_mode(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai.completions.create(model=MODEL, prompt="Hello", max_tokens=2)
    assert "--embeddings" in sent_error(err.value)["message"]
    with pytest.raises(openai.BadRequestError) as err:
        oai.embeddings.create(model=MODEL, input="x", dimensions=N_EMBD + 1)
    assert sent_error(err.value)["param"] == "dimensions"


def unit(v: np.ndarray) -> np.ndarray:
    return np.asarray(v / np.linalg.norm(v))


def test_dimensions_cut_and_renormalize_in_float_and_base64(oai: openai.OpenAI) -> None:
    full = vectors(oai.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float"))
    # no encoding_format: the openai client asks for base64 and decodes it itself
    for fmt in ("float", None):
        kw: dict[str, Any] = {"encoding_format": fmt} if fmt else {}
        short = vectors(oai.embeddings.create(model=MODEL, input=TEXTS, dimensions=64, **kw))
        for s, f in zip(short, full, strict=True):
            assert s.shape == (64,) and np.linalg.norm(s) == pytest.approx(1.0, abs=1e-5)
            assert np.abs(s - unit(f[:64])).max() < 1e-5


def test_a_generation_server_embeds_as_its_embeddings_server_does(
    server: Server, emb: Server, oai: openai.OpenAI
) -> None:
    chat = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=120)
    got = vectors(chat.embeddings.create(model="gemma-test", input=TEXTS, encoding_format="float"))
    want = vectors(oai.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float"))
    # not to 1e-4: the side embedder's weights are not repacked (shared pages), so other matmul kernels
    # round differently (6.6e-3 at most, measured); the same direction all the same
    for g, w in zip(got, want, strict=True):
        assert g.shape == (N_EMBD,) and np.abs(g - w).max() < 2e-2 and g @ w > 0.999
    ids = tokenize(server, TEXTS[0])
    by_ids = chat.embeddings.create(model="gemma-test", input=[ids], dimensions=64)  # base64
    assert by_ids.usage.prompt_tokens == len(ids)
    assert np.abs(vectors(by_ids)[0] - unit(got[0][:64])).max() < 1e-5
    client = ollama.Client(host=server.url, timeout=120)
    embedded = client.embed(model="gemma-test", input=TEXTS[:2], dimensions=64)
    assert np.abs(np.asarray(embedded.embeddings[1]) - unit(got[1][:64])).max() < 1e-5
    older = client.embeddings(model="gemma-test", prompt=TEXTS[2])
    assert np.abs(np.asarray(older.embedding) - got[2]).max() < 1e-5
    tei = httpx.post(f"{server.url}/embed", json={"inputs": TEXTS[0]}, timeout=60)
    assert np.abs(np.asarray(tei.json()[0]) - got[0]).max() < 1e-5
    # the engine generates still, beside it
    assert chat.completions.create(model="gemma-test", prompt="Hello", max_tokens=2).choices[0].text


def test_capabilities_say_what_each_server_does(server: Server, emb: Server, small_server: Server) -> None:
    cases = [(server, ["completion", "embedding"]), (emb, ["embedding"]), (small_server, ["completion"])]
    for srv, does in cases:
        card = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["data"][0]
        assert card["capabilities"] == does
        shown = ollama.Client(host=srv.url, timeout=60).show(card["id"]).capabilities or []
        assert [c for c in shown if c in ("completion", "embedding", "rank")] == does


def test_no_chat_embeddings_keeps_the_400(small_server: Server) -> None:
    r = httpx.post(f"{small_server.url}/v1/embeddings", json={"input": "hi"}, timeout=30)
    assert r.status_code == 400
    assert "--no-chat-embeddings" in r.json()["error"]["message"]
    with pytest.raises(ollama.ResponseError) as err:
        ollama.Client(host=small_server.url, timeout=60).embed(model="default", input="hi")
    assert err.value.status_code == 400
    tei = httpx.post(f"{small_server.url}/embed", json={"inputs": "hi"}, timeout=30)
    assert tei.status_code == 400 and tei.json()["error_type"] == "Validation"


def test_tei_embed_shapes(emb: Server, oai: openai.OpenAI) -> None:
    want = vectors(oai.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float"))
    one = httpx.post(f"{emb.url}/embed", json={"inputs": TEXTS[0]}, timeout=60).json()
    assert len(one) == 1 and len(one[0]) == N_EMBD and np.abs(np.asarray(one[0]) - want[0]).max() < 1e-5
    many = httpx.post(f"{emb.url}/embed", json={"inputs": TEXTS, "dimensions": 32}, timeout=60).json()
    assert [len(v) for v in many] == [32] * 3
    assert np.abs(np.asarray(many[2]) - unit(want[2][:32])).max() < 1e-5
    raw = httpx.post(f"{emb.url}/embed", json={"inputs": TEXTS[0], "normalize": False}, timeout=60).json()
    raw_v = np.asarray(raw[0])
    assert abs(np.linalg.norm(raw_v) - 1.0) > 1e-2 and np.abs(unit(raw_v) - want[0]).max() < 1e-5


def test_tei_truncates_either_end(emb: Server) -> None:
    text = " ".join(f"word{i}" for i in range(200))
    body = {"inputs": text, "truncate": True}
    right = httpx.post(f"{emb.url}/embed", json=body, timeout=60).json()[0]
    left = httpx.post(f"{emb.url}/embed", json={**body, "truncation_direction": "Left"}, timeout=60).json()[0]
    ids = tokenize(emb, text)
    bos, rest = ids[:1], ids[1:]  # Gemma's BOS is kept whichever end is cut
    by_ids = {"encoding_format": "float"}
    head = httpx.post(
        f"{emb.url}/v1/embeddings", json={"input": ids[:MAX_INPUT_TOKENS], **by_ids}, timeout=60
    )
    tail_ids = bos + rest[-(MAX_INPUT_TOKENS - 1) :]
    tail = httpx.post(f"{emb.url}/v1/embeddings", json={"input": tail_ids, **by_ids}, timeout=60)
    assert np.abs(np.asarray(right) - head.json()["data"][0]["embedding"]).max() < 1e-5
    assert np.abs(np.asarray(left) - tail.json()["data"][0]["embedding"]).max() < 1e-5


@pytest.mark.parametrize(
    ("body", "status", "kind", "field", "limit"),
    [
        ({"inputs": "word " * 200}, 422, "Validation", "inputs", MAX_INPUT_TOKENS),
        ({"inputs": "x", "prompt_name": "query"}, 422, "Validation", "prompt_name", None),
        ({"inputs": []}, 400, "Empty", "inputs", 1),
        ({"inputs": ""}, 422, "Validation", "inputs", 1),
        ({"inputs": "x", "dimensions": N_EMBD + 1}, 400, "Validation", "dimensions", N_EMBD),
        ({"inputs": "x", "truncation_direction": "up"}, 422, "Validation", "truncation_direction", None),
        ({"inputs": "x", "pooling": "cls"}, 400, "Validation", "pooling", None),
    ],
)
def test_tei_refusals_in_teis_shape(
    emb: Server, body: dict[str, Any], status: int, kind: str, field: str, limit: int | None
) -> None:
    r = httpx.post(f"{emb.url}/embed", json=body, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()
    assert error["error_type"] == kind and error["field"] == field and field in error["error"]
    assert error.get("limit") == limit


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
