"""Ollama's native API with its own clients, unchanged: the `ollama` Python client, langchain-ollama and
litellm's `ollama_chat/` provider against `llmhost serve` of an instruct model (SmolLM2, its own chat
template), /api/embed against `llmhost serve --embeddings`, and an endpoint of two models on demand."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import numpy as np
import ollama
import openai
import pytest

from llmhost.store.resolve import default_model_path
from tests.integration.conftest import CHAT_TEMPLATE, FIXTURES, SMOLLM2, Server, start_server, stop_server
from tests.integration.endpoint_helpers import ENGINE, Endpoint, start_endpoint, stop_endpoint
from tests.s3server import fake_credentials, moto_server
from tests.sdk_errors import sent_error

MODEL = "smol"
# SmolLM2's own template, and the tools (Hermes' <tool_call>) when a request has some: its own shows none
TOOLS_TEMPLATE = FIXTURES / "smollm2_tools.jinja"
GREEDY = {"temperature": 0, "num_predict": 24}
PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


@pytest.fixture(scope="module")
def smol(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("ollama"),
        str(SMOLLM2),
        "--served-model-name",
        MODEL,
        "--chat-template",
        str(TOOLS_TEMPLATE),
        "--max-concurrent",
        "4",
        "--max-input-tokens",
        "768",
        "--max-total-tokens",
        "1024",
    )
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def emb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("ollama-embed"),
        "--embeddings",
        "--served-model-name",
        "gemma-embed",
        "--max-input-tokens",
        "48",
        "--max-batch-tokens",
        "128",
    )
    yield srv
    stop_server(srv)


@pytest.fixture()
def client(smol: Server) -> ollama.Client:
    return ollama.Client(host=smol.url, timeout=120)


def test_chat_answers_with_timings_in_nanoseconds(client: ollama.Client) -> None:
    r = client.chat(model=MODEL, messages=ASK, options=GREEDY, stream=False)
    assert r.done and r.done_reason in ("stop", "length")
    assert r.message.role == "assistant" and "Paris" in (r.message.content or "")
    assert r.prompt_eval_count and r.prompt_eval_count > 10
    assert r.eval_count and 0 < r.eval_count <= 24
    # nanoseconds: a generation of a few tokens takes more than a microsecond, less than a minute
    assert r.total_duration and 1_000 < r.total_duration < 60 * 10**9
    assert r.eval_duration is not None and r.eval_duration < r.total_duration
    assert r.prompt_eval_duration is not None and r.prompt_eval_duration > 0
    assert r.load_duration == 0


def test_chat_stream_is_ndjson_ending_with_done(client: ollama.Client, smol: Server) -> None:
    whole = client.chat(model=MODEL, messages=ASK, options=GREEDY, stream=False).message.content
    parts = list(client.chat(model=MODEL, messages=ASK, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert parts[-1].eval_count and parts[-1].done_reason
    assert "".join(p.message.content or "" for p in parts) == whole
    with httpx.stream(
        "POST", f"{smol.url}/api/chat", json={"model": MODEL, "messages": ASK, "options": GREEDY}, timeout=120
    ) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in r.iter_lines() if x]
    assert lines[-1]["done"] is True and "message" in lines[-1]


def test_generate_templated_raw_and_context(client: ollama.Client) -> None:
    r = client.generate(
        model=MODEL, prompt="What is the capital of France?", system="Answer in one word.", options=GREEDY
    )
    assert "Paris" in r.response and r.done and r.context
    raw = client.generate(model=MODEL, prompt="The capital of France is", raw=True, options=GREEDY)
    assert raw.response and raw.context is None
    streamed = list(
        client.generate(model=MODEL, prompt="The capital of France is", raw=True, options=GREEDY, stream=True)
    )
    assert "".join(p.response for p in streamed) == raw.response and streamed[-1].done


def test_options_map_onto_sampling(client: ollama.Client) -> None:
    r = client.generate(
        model=MODEL,
        prompt="Count: 1, 2, 3,",
        raw=True,
        options={"temperature": 0, "num_predict": 40, "stop": [" 6"]},
    )
    assert r.done_reason == "stop" and "6" not in r.response and "5" in r.response
    short = client.generate(model=MODEL, prompt="Count: 1, 2, 3,", raw=True, options={"num_predict": 3})
    assert short.done_reason == "length" and short.eval_count == 3
    seeded = [
        client.generate(
            model=MODEL,
            prompt="Tell me a story.",
            options={
                "seed": 7,
                "num_predict": 12,
                "temperature": 1.0,
                "top_k": 50,
                "min_p": 0.05,
                "repeat_penalty": 1.2,
            },
        ).response
        for _ in range(2)
    ]
    assert seeded[0] == seeded[1]


def test_structured_output_follows_the_schema(client: ollama.Client) -> None:
    msgs = [{"role": "user", "content": "Alice is 30 years old. Give her name and age as JSON."}]
    r = client.chat(model=MODEL, messages=msgs, format=PERSON, options={"temperature": 0})
    jsonschema.validate(json.loads(r.message.content or ""), PERSON)
    j = client.generate(
        model=MODEL,
        prompt="Describe a cat as JSON.",
        format="json",
        options={"temperature": 0, "num_predict": 200},
    )
    assert isinstance(json.loads(j.response), dict)


def test_tools_reach_the_template_and_history_renders(client: ollama.Client) -> None:
    """SmolLM2 135M does not call tools however asked (its calls are read back as with OpenAI's
    chat: tests/unit/server/test_ollama.py); what is checked here is that the tools and a history of
    calls and results reach the model."""
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    bare = client.chat(model=MODEL, messages=ask, options={"num_predict": 1})
    offered = client.chat(model=MODEL, messages=ask, tools=[WEATHER_TOOL], options={"num_predict": 1})
    assert offered.prompt_eval_count and bare.prompt_eval_count
    assert offered.prompt_eval_count > bare.prompt_eval_count + 20  # the tool's schema is in the prompt
    call = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    history = [
        *ask,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"},
    ]
    answer = client.chat(model=MODEL, messages=history, tools=[WEATHER_TOOL], options=GREEDY)
    assert answer.done and answer.prompt_eval_count and answer.prompt_eval_count > offered.prompt_eval_count


def test_list_show_ps_version(client: ollama.Client, smol: Server) -> None:
    models = client.list().models
    assert [m.model for m in models] == [f"{MODEL}:latest"]
    d = models[0].details
    assert d is not None and d.family == "llama" and d.format == "gguf"
    assert d.quantization_level == "Q4_1" and d.parameter_size and d.parameter_size.endswith("M")
    shown = client.show(MODEL)
    assert shown.modelinfo and shown.modelinfo["llama.context_length"] == 8192
    assert {"completion", "tools", "embedding"} <= set(shown.capabilities or [])
    # a chat model embeds, as Ollama's do (a second context of the model, loaded on this first request)
    embedded = client.embed(model=MODEL, input=["hi", "the weather in Paris"], dimensions=32)
    assert [len(v) for v in embedded.embeddings] == [32, 32] and embedded.prompt_eval_count
    assert shown.template and "im_start" in shown.template
    running = client.ps().models
    assert running[0].model == f"{MODEL}:latest" and running[0].context_length == 1024
    assert httpx.get(f"{smol.url}/api/version").json()["version"]
    assert httpx.head(smol.url + "/").status_code == 200
    assert httpx.get(smol.url + "/").text == "Ollama is running"


def test_errors_in_ollamas_shape(client: ollama.Client, smol: Server) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"think": True}, f'"{MODEL}" does not support thinking'),
        ({"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}, "image"),
        ({"options": {"num_ctx": 100000}}, "num_ctx"),
        ({"options": {"num_thread": 4}}, "num_thread"),
        ({"options": {"mirostat": 2}}, "mirostat"),
        ({"format": "yaml"}, "format"),
    ]
    for extra, words in cases:
        body = {"model": MODEL, "messages": ASK, "stream": False, **extra}
        r = httpx.post(f"{smol.url}/api/chat", json=body, timeout=60)
        assert r.status_code == 400 and words in r.json()["error"], (extra, r.text)
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model=MODEL, messages=ASK, think=True)
    assert err.value.status_code == 400 and "does not support thinking" in err.value.error
    with pytest.raises(ollama.ResponseError) as err:
        client.pull(MODEL)
    assert err.value.status_code == 400 and "does not pull" in err.value.error
    bad = httpx.post(f"{smol.url}/api/generate", content=b"{", timeout=10)
    assert bad.status_code == 400 and "error" in bad.json()
    assert client.chat(model=MODEL, messages=[]).done_reason == "load"


NOT_FOUND = 'model "no-such-model" not found, try pulling it first'


def test_a_model_not_served_is_ollamas_404_and_the_servers_names_answer(
    client: ollama.Client, smol: Server
) -> None:
    refused = (
        lambda: client.chat(model="no-such-model", messages=ASK, options={"num_predict": 1}),
        lambda: list(client.chat(model="no-such-model", messages=ASK, stream=True)),
        lambda: client.generate(model="no-such-model", prompt="hi", options={"num_predict": 1}),
        lambda: client.show("no-such-model"),
        lambda: client.embed(model="no-such-model", input="hi"),
    )
    for call in refused:
        with pytest.raises(ollama.ResponseError) as err:
            call()
        assert (err.value.status_code, err.value.error) == (404, NOT_FOUND)
    r = httpx.post(f"{smol.url}/api/chat", json={"model": "no-such-model", "messages": ASK}, timeout=30)
    assert r.status_code == 404 and r.json()["error"] == NOT_FOUND
    for name in (MODEL, f"{MODEL}:latest", "default", "default:latest", SMOLLM2.stem):
        assert client.chat(model=name, messages=ASK, options={"num_predict": 1}).done, name
    # the OpenAI routes take any name: the one model answers
    oai = openai.OpenAI(base_url=f"{smol.url}/v1", api_key="unused", max_retries=0)
    assert oai.chat.completions.create(model="no-such-model", messages=ASK, max_tokens=1).choices  # type: ignore[arg-type]


def test_strict_model_names_refuse_on_openai_and_anthropic(tmp_path: Path) -> None:
    srv = start_server(tmp_path, str(SMOLLM2), "--served-model-name", MODEL, "--strict-model-names")
    try:
        oai = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.NotFoundError) as err:
            oai.chat.completions.create(model="no-such-model", messages=ASK, max_tokens=1)  # type: ignore[arg-type]
        assert sent_error(err.value)["param"] == "model" and MODEL in sent_error(err.value)["message"]
        with pytest.raises(openai.NotFoundError):
            oai.completions.create(model="no-such-model", prompt="hi", max_tokens=1)
        with pytest.raises(openai.NotFoundError):
            oai.responses.create(model="no-such-model", input="hi", max_output_tokens=16)
        claude = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as nf:
            claude.messages.create(model="no-such-model", max_tokens=1, messages=ASK)  # type: ignore[arg-type]
        assert sent_error(nf.value)["type"] == "not_found_error"
        for name in (MODEL, "default", SMOLLM2.stem):
            assert oai.chat.completions.create(model=name, messages=ASK, max_tokens=1).choices  # type: ignore[arg-type]
        assert claude.messages.create(model=MODEL, max_tokens=1, messages=ASK).content is not None  # type: ignore[arg-type]
    finally:
        stop_server(srv)


def ollama_requests(server: Server) -> float:
    """llmhost_requests_total summed over the samples labelled api="ollama"."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    lines = [x for x in text.splitlines() if x.startswith("llmhost_requests_total{") and 'api="ollama"' in x]
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines)


def test_metrics_count_ollama_requests(client: ollama.Client, smol: Server) -> None:
    before = ollama_requests(smol)
    client.generate(model=MODEL, prompt="Hello", options={"num_predict": 2})
    list(client.chat(model=MODEL, messages=ASK, options={"num_predict": 2}, stream=True))
    assert ollama_requests(smol) == before + 2


def test_langchain_chat_ollama(smol: Server) -> None:
    from langchain_ollama import ChatOllama

    llm = ChatOllama(model=MODEL, base_url=smol.url, temperature=0, num_predict=24)
    answer = llm.invoke("What is the capital of France? Answer in one word.")
    assert "Paris" in str(answer.content)
    chunks = list(llm.stream("What is the capital of France? Answer in one word."))
    assert "Paris" in "".join(str(c.content) for c in chunks)


def test_litellm_ollama_chat(smol: Server) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list
    import litellm

    r = litellm.completion(
        model=f"ollama_chat/{MODEL}", api_base=smol.url, messages=ASK, temperature=0, max_tokens=24
    )
    assert "Paris" in r.choices[0].message.content
    g = litellm.completion(
        model=f"ollama/{MODEL}", api_base=smol.url, messages=ASK, temperature=0, max_tokens=24
    )
    assert g.choices[0].message.content


def test_embed_and_older_embeddings(emb: Server) -> None:
    client = ollama.Client(host=emb.url, timeout=120)
    texts = ["The cat sat on the mat.", "A kitten was sitting on the rug.", "Interest rates rose."]
    r = client.embed(model="gemma-embed", input=texts)
    vectors = [np.asarray(v) for v in r.embeddings]
    assert len(vectors) == 3 and vectors[0].shape == (640,) and r.prompt_eval_count
    cos = [float(vectors[0] @ v / np.linalg.norm(vectors[0]) / np.linalg.norm(v)) for v in vectors[1:]]
    assert cos[0] > cos[1]
    old = client.embeddings(model="gemma-embed", prompt=texts[0])
    assert np.allclose(np.asarray(old.embedding), vectors[0], atol=1e-4)
    long = client.embed(model="gemma-embed", input="word " * 200)  # truncate: true (the default) cuts it
    assert len(long.embeddings[0]) == 640
    with pytest.raises(ollama.ResponseError) as err:
        client.embed(model="gemma-embed", input="word " * 200, truncate=False)
    assert err.value.status_code in (400, 413)


# -- through an endpoint of two models on demand -------------------------------------------------------
@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    folder = tmp_path_factory.mktemp("ollama-models")
    (folder / "smol.gguf").symlink_to(SMOLLM2)
    (folder / "gemma.gguf").symlink_to(default_model_path())
    (folder / "gemma.yaml").write_text(f'engine: {{chat_template: "{CHAT_TEMPLATE}"}}\n')
    endpoint = f"""
name: ollama
models_dir:
  path: {folder}
  defaults:
    resources: {{num_cpus: 0.5, memory_mb: 700}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
    max_wait_s: 90
on_demand: {{client_keep_alive: any}}
"""
    ep = start_endpoint(tmp_path_factory.mktemp("ollama-ep"), endpoint, args=("--memory-budget-mb", "2000"))
    yield ep
    stop_endpoint(ep)


def test_endpoint_lists_routes_and_unloads_by_keep_alive(two_models: Endpoint) -> None:
    client = ollama.Client(host=two_models.url, timeout=180)
    listed = {m.model: m for m in client.list().models}
    assert set(listed) == {"smol:latest", "gemma:latest"}
    families = {name: m.details.family for name, m in listed.items() if m.details}
    assert families == {"smol:latest": "llama", "gemma:latest": "gemma3"}
    # `name:latest` (as /api/tags lists it) names the component; the stream passes through as NDJSON
    parts = list(client.chat(model="smol:latest", messages=ASK, options=GREEDY, stream=True))
    assert parts[-1].done and "Paris" in "".join(p.message.content or "" for p in parts)
    running = {m.model: m for m in client.ps().models}
    assert "smol:latest" in running and running["smol:latest"].expires_at is not None
    # keep_alive 0: the model unloads once the answer is given (the endpoint's on-demand semantics)
    g = client.generate(
        model="gemma", prompt="Once upon a time", raw=True, options={"num_predict": 3}, keep_alive=0
    )
    assert g.done and g.eval_count == 3
    deadline = time.monotonic() + 120
    while "gemma:latest" in {m.model for m in client.ps().models} and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "gemma:latest" not in {m.model for m in client.ps().models}


def test_endpoint_errors_in_ollamas_shape(two_models: Endpoint) -> None:
    client = ollama.Client(host=two_models.url, timeout=60)
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="nope", messages=ASK)
    assert err.value.status_code == 404 and "nope" in err.value.error
    with pytest.raises(ollama.ResponseError) as err:
        client.pull("smol")  # a name of Ollama's library: only s3:// references are pulled
    assert err.value.status_code == 400 and "s3://" in err.value.error
    with pytest.raises(ollama.ResponseError) as err:
        client.delete("nope")
    assert err.value.status_code == 404
    assert httpx.get(f"{two_models.url}/api/version").json()["version"]
    assert httpx.head(two_models.url + "/").status_code == 200


def test_endpoint_copies_and_deletes_models_of_its_folder(two_models: Endpoint) -> None:
    client = ollama.Client(host=two_models.url, timeout=60)
    assert client.copy("smol:latest", "smol-copy").status == "success"
    models = {m.model: m for m in client.list().models}
    assert "smol-copy:latest" in models and models["smol-copy:latest"].size == models["smol:latest"].size
    with pytest.raises(ollama.ResponseError) as err:
        client.copy("smol", "gemma")
    assert err.value.status_code == 400 and "exists" in err.value.error
    assert client.delete("smol-copy").status == "success"
    assert "smol-copy:latest" not in {m.model for m in client.list().models}
    with pytest.raises(ollama.ResponseError) as err:
        client.delete("smol-copy")
    assert err.value.status_code == 404


def test_endpoint_pulls_an_s3_model_into_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/api/pull of an s3:// reference (moto standing in for S3): Ollama's progress stream, then the
    model is in /api/tags and answers."""
    fake_credentials(monkeypatch, tmp_path / "cache")
    folder = tmp_path / "models"
    folder.mkdir()
    with moto_server() as s3:
        s3.client().create_bucket(Bucket="models")
        s3.client().upload_file(str(SMOLLM2), "models", "ollama/smol.gguf")
        endpoint = f"""
name: pull
models_dir:
  path: {folder}
  defaults:
    resources: {{num_cpus: 0.5, memory_mb: 700}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
"""
        ep = start_endpoint(tmp_path, endpoint, wait_ping=False, args=("--s3-endpoint-url", s3.url))
        try:
            client = ollama.Client(host=ep.url, timeout=180)
            with pytest.raises(ollama.ResponseError) as err:
                client.pull("llama3.2")
            assert err.value.status_code == 400 and "s3://" in err.value.error
            steps = list(client.pull("s3://models/ollama/smol.gguf", stream=True))
            assert steps[0].status == "pulling manifest" and steps[-1].status == "success"
            fetched = [p for p in steps if p.total]
            assert fetched and fetched[0].completed == fetched[0].total == SMOLLM2.stat().st_size
            assert "smol:latest" in {m.model for m in client.list().models}
            r = client.generate(model="smol", prompt="Hello", raw=True, options={"num_predict": 2})
            assert r.done and r.eval_count == 2
            with pytest.raises(ollama.ResponseError) as err:
                client.pull("s3://models/ollama/smol.gguf")
            assert err.value.status_code == 400 and "taken" in err.value.error
        finally:
            stop_endpoint(ep)
