"""Every route of DESIGN §3, with the official openai client where it applies."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Server


@pytest.fixture()
def oai(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=120)


def test_openai_models(oai: openai.OpenAI) -> None:
    models = oai.models.list()
    assert [m.id for m in models.data] == ["gemma-test"]


def test_openai_completion(oai: openai.OpenAI) -> None:
    r = oai.completions.create(
        model="gemma-test", prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert r.choices[0].text.strip()
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage is not None and r.usage.completion_tokens <= 8


def test_openai_completion_stream(oai: openai.OpenAI) -> None:
    # long enough to cross a second on most hosts: every chunk carries the stream's one id, created time
    # and model, as OpenAI's do
    stream = oai.completions.create(
        model="gemma-test",
        prompt="Once upon a time",
        max_tokens=40,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text.strip()
    assert chunks[-1].choices[0].finish_reason == "length"
    assert len({(c.id, c.created, c.model) for c in chunks}) == 1


def test_openai_chat(oai: openai.OpenAI) -> None:
    r = oai.chat.completions.create(
        model="gemma-test",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}],
        max_tokens=12,
        temperature=0,
    )
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.usage is not None and r.usage.prompt_tokens > 5


def test_openai_chat_stream_with_usage(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model="gemma-test",
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    assert len({(c.id, c.created, c.model) for c in chunks}) == 1


def test_sampling_with_seed_is_reproducible(oai: openai.OpenAI) -> None:
    kw: dict[str, Any] = {"model": "gemma-test", "prompt": "My favourite colour is", "max_tokens": 12}
    # the same seed gives the same draw from the same logits. Logits move by a hair with how much of the
    # prompt was cached and where in the KV cache each position landed (attention adds cells in their
    # order), so both requests find the prompt cached by this first one, and the draws are compared for
    # as long as the logits they were drawn from are the same (a fresh-clone run diverged at token 6)
    oai.completions.create(**kw | {"max_tokens": 1}, temperature=0)
    a = oai.completions.create(**kw, temperature=1.0, top_p=0.9, seed=42, logprobs=5)
    b = oai.completions.create(**kw, temperature=1.0, top_p=0.9, seed=42, logprobs=5)
    la, lb = a.choices[0].logprobs, b.choices[0].logprobs
    assert la is not None and lb is not None and la.tokens and la.top_logprobs and lb.top_logprobs
    steps = zip(la.tokens, lb.tokens or [], la.top_logprobs, lb.top_logprobs, strict=True)
    for i, (ta, tb, top_a, top_b) in enumerate(steps):
        if top_a.keys() != top_b.keys() or any(abs(top_a[k] - top_b[k]) > 1e-6 for k in top_a):
            break
        assert ta == tb, f"draw {i}: {ta!r} vs {tb!r} from the same logits and seed"
    c = oai.completions.create(**kw, temperature=1.0, top_p=0.9, seed=7)
    assert c.choices[0].text != a.choices[0].text, "the seed changed nothing"


def test_stop_string_is_not_emitted(server: Server) -> None:
    body = {"prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 30, "temperature": 0, "stop": [" 9"]}
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()
    text = r["choices"][0]["text"]
    assert " 9" not in text and r["choices"][0]["finish_reason"] == "stop"
    assert " 8" in text


def test_logit_bias_forces_a_token(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        token = c.post("/tokenize", json={"content": " banana"}).json()["tokens"][0]
        body = {"prompt": "Hello", "max_tokens": 3, "temperature": 0, "logit_bias": {str(token): 100}}
        r = c.post("/v1/completions", json=body).json()
    assert r["choices"][0]["text"] == " banana" * 3


def sse_events(response: httpx.Response, prefix: str) -> list[Any]:
    out = []
    for line in response.iter_lines():
        if line.startswith(prefix):
            payload = line[len(prefix) :].strip()
            if payload != "[DONE]":
                out.append(json.loads(payload))
    return out


def test_invocations_tgi_body(server: Server) -> None:
    body = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 6, "details": True}}
    r = httpx.post(f"{server.url}/invocations", json=body, timeout=60)
    assert r.status_code == 200
    [out] = r.json()
    assert out["generated_text"]
    d = out["details"]
    assert d["finish_reason"] in ("length", "eos_token", "stop_sequence")
    assert d["generated_tokens"] == len(d["tokens"]) == 6
    assert {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "ttft_ms", "queue_ms"} <= d[
        "timings"
    ].keys()


def test_invocations_tgi_stream(server: Server) -> None:
    body = {"inputs": "Hello", "parameters": {"max_new_tokens": 5}, "stream": True}
    with httpx.stream("POST", f"{server.url}/invocations", json=body, timeout=60) as r:
        events = sse_events(r, "data:")
    assert len(events) == 5
    assert all("token" in e for e in events)
    assert events[-1]["generated_text"] == "".join(e["token"]["text"] for e in events)


@pytest.mark.parametrize("kind", ["prompt", "messages"])
def test_invocations_openai_bodies(server: Server, kind: str) -> None:
    body: dict[str, Any] = {"max_tokens": 5, "temperature": 0}
    body |= {"prompt": "Hi"} if kind == "prompt" else {"messages": [{"role": "user", "content": "Hi"}]}
    r = httpx.post(f"{server.url}/invocations", json=body, timeout=60).json()
    assert r["object"] == ("text_completion" if kind == "prompt" else "chat.completion")
    assert r["usage"]["completion_tokens"] <= 5
    with httpx.stream("POST", f"{server.url}/invocations", json=body | {"stream": True}, timeout=60) as s:
        chunks = sse_events(s, "data: ")
    assert chunks and chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")


def test_tgi_native_routes(server: Server) -> None:
    body = {"inputs": "Paris is", "parameters": {"max_new_tokens": 4, "return_full_text": True}}
    r = httpx.post(f"{server.url}/generate", json=body, timeout=60).json()
    assert r["generated_text"].startswith("Paris is")
    with httpx.stream("POST", f"{server.url}/generate_stream", json=body, timeout=60) as s:
        events = sse_events(s, "data:")
    assert events[-1]["generated_text"].startswith("Paris is")


def test_tokenize_roundtrip_and_custom_attributes(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        tokens = c.post("/tokenize", json={"content": "Hello world"}).json()["tokens"]
        assert c.post("/detokenize", json={"tokens": tokens}).json()["content"] == "Hello world"
        r = c.post(
            "/invocations",
            json={"inputs": "Hi", "parameters": {"max_new_tokens": 1}},
            headers={"X-Amzn-SageMaker-Custom-Attributes": "trace=1"},
        )
        assert r.headers["x-amzn-sagemaker-custom-attributes"] == "trace=1"


def test_health_and_metrics(server: Server) -> None:
    assert httpx.get(f"{server.url}/health").json()["status"] == "ready"

    def samples() -> dict[str, float]:
        text = httpx.get(f"{server.url}/metrics").text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
        return out

    before = samples()
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Metrics:", "max_tokens": 3}, timeout=60)
    assert r.status_code == 200
    after = samples()
    for name, grew_by in (
        ("llmhost_requests_total", 1),
        ("llmhost_prompt_tokens_total", r.json()["usage"]["prompt_tokens"]),
        ("llmhost_generation_tokens_total", 3),
        ("llmhost_time_to_first_token_seconds_count", 1),
        ("llmhost_time_per_output_token_seconds_count", 1),
        ("llmhost_e2e_request_latency_seconds_count", 1),
        ("llmhost_prefix_cache_lookups_total", 1),
    ):
        assert after[name] - before.get(name, 0.0) == grew_by, name
    assert after["llmhost_step_duration_seconds_count"] > before["llmhost_step_duration_seconds_count"]
    for gauge in ("llmhost_num_requests_running", "llmhost_num_requests_waiting"):
        assert gauge in after
    assert 0.0 <= after["llmhost_kv_cache_usage_ratio"] <= 1.0
    assert after["llmhost_kv_cache_capacity_tokens"] > 0
