"""The official clients, unchanged, against `llmhost serve` and through `llmhost endpoint`: openai
(n, structured output, tools), huggingface_hub's InferenceClient and text_generation's Client (TGI)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema
import openai
import pytest
import text_generation
from huggingface_hub import InferenceClient

from tests.integration.conftest import CHAT_TEMPLATE, Server
from tests.integration.endpoint_helpers import start_endpoint, stop_endpoint
from tests.integration.neartie import assert_same_or_near_tie
from tests.integration.test_batching import OTHERS, TARGET, complete
from tests.sdk_errors import sent_error

MODEL = "gemma-test"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"type": "string", "enum": ["admin", "editor", "viewer"]},
        "address": {
            "type": "object",
            "properties": {"country": {"type": "string", "enum": ["FR", "DE", "US"]}},
            "required": ["country"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 3},
    },
    "required": ["name", "age", "role", "address", "tags"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def endpoint_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yaml_text = f"""
name: clients
instance: {{type: local, price_per_hour: 0.1}}
components:
  - name: {MODEL}
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {{max_input_tokens: 512, max_total_tokens: 1024, max_concurrent: 4,
              chat_template: "{CHAT_TEMPLATE}"}}
    startup_health_check_timeout_s: 90
"""
    ep = start_endpoint(tmp_path_factory.mktemp("clients"), yaml_text)
    yield ep.url
    stop_endpoint(ep)


@pytest.fixture(params=["serve", "endpoint"])
def url(request: pytest.FixtureRequest, server: Server) -> str:
    if request.param == "serve":
        return server.url
    return str(request.getfixturevalue("endpoint_url"))


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)


# -- openai ------------------------------------------------------------------------------------------
def test_openai_n_choices_and_prompt_lists(url: str) -> None:
    c = oai(url)
    r = c.completions.create(
        model=MODEL,
        prompt=["The sky is", "Water is"],
        n=2,
        max_tokens=6,
        temperature=1.0,
        seed=7,
        extra_body={"ignore_eos": True},
    )
    assert [ch.index for ch in r.choices] == [0, 1, 2, 3]
    assert all(ch.text for ch in r.choices)
    single = c.completions.create(
        model=MODEL,
        prompt="The sky is",
        max_tokens=6,
        temperature=1.0,
        seed=7,
        extra_body={"ignore_eos": True},
    )
    # prompt tokens once per prompt (its choices share them), completion tokens of all four choices
    assert r.usage is not None and single.usage is not None
    assert r.usage.completion_tokens == 24
    assert single.usage.prompt_tokens < r.usage.prompt_tokens < 2 * single.usage.prompt_tokens + 2
    ids = c.completions.create(model=MODEL, prompt=[[2, 818, 7217], [2, 9563]], max_tokens=3, temperature=0)
    assert len(ids.choices) == 2
    chat = c.chat.completions.create(model=MODEL, messages=ASK, n=3, max_tokens=5, temperature=1.0)
    assert sorted(ch.index for ch in chat.choices) == [0, 1, 2]


def test_openai_n_streamed(url: str) -> None:
    c = oai(url)
    stream = c.chat.completions.create(
        model=MODEL,
        messages=ASK,
        n=2,
        max_tokens=6,
        temperature=1.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts = {0: "", 1: ""}
    finished = set()
    usage = None
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finished.add(ch.index)
        usage = chunk.usage or usage
    assert finished == {0, 1} and all(texts.values())
    assert usage is not None and usage.completion_tokens <= 12


def test_openai_json_schema_is_always_valid(url: str, server: Server) -> None:
    c = oai(url)
    fmt = {"type": "json_schema", "json_schema": {"name": "user", "schema": SCHEMA, "strict": True}}
    rounds = 3 if url == server.url else 1
    outputs: list[str] = []
    for i in range(rounds):
        r = c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "A user as JSON"}],
            response_format=fmt,
            n=8,
            max_tokens=120,
            temperature=1.0,
            seed=100 + i,
        )  # type: ignore[arg-type]
        outputs += [ch.message.content or "" for ch in r.choices]
        assert all(ch.finish_reason == "stop" for ch in r.choices)
    for text in outputs:
        jsonschema.validate(json.loads(text), SCHEMA)
    obj = c.completions.create(
        model=MODEL,
        prompt="Config:",
        max_tokens=80,
        temperature=1.0,
        seed=3,
        extra_body={"response_format": {"type": "json_object"}},
    )
    if obj.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(obj.choices[0].text), dict)


def test_openai_tool_choices(url: str) -> None:
    c = oai(url)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        # one call: at temperature 1 a base model may keep appending parallel calls until max_tokens
        r = c.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[WEATHER, TIME],
            tool_choice=choice,
            max_tokens=100,
            temperature=1.0,
            seed=1,
            parallel_tool_calls=False,
        )  # type: ignore[arg-type]
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.content is None
        calls = ch.message.tool_calls or []
        assert calls and all(call.id.startswith("call_") for call in calls)
        names = {call.function.name for call in calls}  # type: ignore[union-attr]
        assert names <= {"get_weather", "get_time"}
        if not isinstance(choice, str):
            assert names == {"get_weather"}
        for call in calls:
            json.loads(call.function.arguments)  # type: ignore[union-attr]
    none = c.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=5, temperature=0
    )
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    auto = c.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="auto", max_tokens=8, temperature=0
    )
    message = auto.choices[0].message
    assert message.content or message.tool_calls


def test_forced_call_at_the_default_temperature_fits_max_tokens(server: Server) -> None:
    """A regression: with parallel calls allowed (the default) and no bound, the base model kept appending
    calls until max_tokens cut the array, which came back as raw JSON content with finish_reason length.
    Now at most one call per tool, and a cut array keeps its complete calls."""
    c = oai(server.url)
    for seed in range(6):
        r = c.chat.completions.create(
            model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=60, seed=seed
        )
        ch = r.choices[0]
        assert ch.message.content is None, (seed, ch.message.content)
        assert ch.finish_reason == "tool_calls" and ch.message.tool_calls, (seed, ch)
        assert [call.function.name for call in ch.message.tool_calls] == ["get_weather"]  # type: ignore[union-attr]


def test_forced_call_with_an_integer_argument_fits_max_tokens(server: Server) -> None:
    """pydantic-ai's structured output (a forced `final_result` call of a {name, age} object) used to run
    out of max_tokens inside `age`: an integer now has at most 16 digits, as llama.cpp's grammar allows."""
    person = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    final = {"type": "function", "function": {"name": "final_result", "parameters": person, "strict": True}}
    c, ask = oai(server.url), [{"role": "user", "content": "Extract: John is 30."}]
    for seed in range(6):
        r = c.chat.completions.create(
            model=MODEL,
            messages=ask,  # type: ignore[arg-type]
            tools=[final],
            tool_choice="required",
            max_tokens=64,
            seed=seed,
        )  # type: ignore[list-item]
        calls = r.choices[0].message.tool_calls or []
        assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1, (seed, r.choices[0])
        arguments = json.loads(calls[0].function.arguments)  # type: ignore[union-attr]
        assert isinstance(arguments["age"], int) and abs(arguments["age"]) < 10**16


def test_openai_tool_call_streamed_and_next_turn(url: str) -> None:
    c = oai(url)
    stream = c.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=80,
        temperature=0,
        stream=True,
    )
    deltas = [ch for chunk in stream for ch in chunk.choices]
    calls = [tc for d in deltas for tc in d.delta.tool_calls or []]
    assert calls and calls[0].function is not None and calls[0].function.name == "get_weather"
    assert deltas[-1].finish_reason == "tool_calls"
    arguments = calls[0].function.arguments or ""
    follow = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": calls[0].id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": calls[0].id, "content": '{"temp": 21}'},
    ]
    r = c.chat.completions.create(
        model=MODEL,
        messages=follow,  # type: ignore[arg-type]
        tools=[WEATHER],
        max_tokens=5,
        temperature=0,
    )
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")


def test_openai_refusals_name_the_field(url: str) -> None:
    c = oai(url)
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=2, extra_body={"frobnicate": 1})
    assert sent_error(err.value)["param"] == "frobnicate"
    bad = {
        "type": "json_schema",
        "json_schema": {
            "name": "x",
            "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)b"}}},
        },
    }
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=2, response_format=bad)  # type: ignore[arg-type]
    refused = sent_error(err.value)
    assert "look-around" in refused["message"] and str(refused["param"]).startswith("response_format")
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(
            model=MODEL,
            messages=ASK,
            max_tokens=2,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert str(sent_error(err.value)["param"]).startswith("tool_choice")


# -- TGI ---------------------------------------------------------------------------------------------
def test_inference_client_text_generation(url: str) -> None:
    c = InferenceClient(base_url=url)
    assert c.text_generation("The capital of France is", max_new_tokens=4)
    out = c.text_generation(
        "The capital of France is", max_new_tokens=4, details=True, decoder_input_details=True, top_n_tokens=2
    )
    d = out.details
    assert d is not None and d.generated_tokens == 4 and len(d.tokens) == 4
    assert d.prefill[0].logprob is None and all(t.logprob is not None for t in d.prefill[1:])
    assert len(d.prefill) == 6  # <bos> The capital of France is
    assert d.top_tokens is not None and all(len(top) == 2 for top in d.top_tokens)
    streamed = list(
        c.text_generation("The capital of France is", max_new_tokens=4, stream=True, details=True)
    )
    assert len(streamed) == 4 and streamed[-1].generated_text is not None
    assert streamed[-1].generated_text == "".join(s.token.text for s in streamed)
    text = c.text_generation(
        "Phone: ", max_new_tokens=12, grammar={"type": "regex", "value": "[0-9]{3}-[0-9]{4}"}
    )
    assert len(text) == 8 and text[3] == "-"
    js = c.text_generation(
        "A user:", max_new_tokens=120, seed=5, do_sample=True, grammar={"type": "json", "value": SCHEMA}
    )
    jsonschema.validate(json.loads(js), SCHEMA)
    chat = c.chat_completion(messages=ASK, max_tokens=4, temperature=0)
    assert chat.choices[0].message.content


def test_text_generation_client(url: str) -> None:
    c = text_generation.Client(url, timeout=120)
    r = c.generate(
        "The capital of France is",
        max_new_tokens=4,
        top_n_tokens=1,
        typical_p=0.9,
        do_sample=True,
        seed=2,
        truncate=3,
    )
    assert r.details.generated_tokens == 4 and len(r.details.top_tokens or []) == 4
    tokens = [s.token.text for s in c.generate_stream("The capital of France is", max_new_tokens=4)]
    assert len(tokens) == 4
    with pytest.raises(text_generation.errors.ValidationError):
        c.generate("Hello", max_new_tokens=10**6)


def test_tgi_info_and_error_shape(url: str) -> None:
    info = httpx.get(f"{url}/info", timeout=30).json()
    assert info["max_total_tokens"] > info["max_input_tokens"] > 0 and info["max_stop_sequences"] >= 1
    r = httpx.post(f"{url}/generate", json={"inputs": "x", "parameters": {"best_of": 2}}, timeout=30)
    assert r.status_code == 422 and r.json()["error_type"] == "validation"
    r = httpx.post(f"{url}/generate", json={"inputs": "x", "parameters": {"watermark": True}}, timeout=30)
    assert r.status_code == 422 and "watermark" in r.json()["error"]
    r = httpx.post(f"{url}/", json={"inputs": "x", "parameters": {"nope": 1}}, timeout=30)
    assert r.status_code == 400 and r.json() | {"request_id": ""} == {
        "error": "unsupported field 'parameters.nope': llmhost does not implement it",
        "error_type": "validation",
        "field": "parameters.nope",
        "request_id": "",
    }


# -- batching ----------------------------------------------------------------------------------------
def test_constrained_beside_unconstrained_leaves_greedy_output_alone(server: Server) -> None:
    alone = complete(server.url, TARGET)
    constrained = {
        "prompt": "A user as JSON:",
        "max_tokens": 60,
        "temperature": 1.0,
        "n": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "u", "schema": SCHEMA}},
    }

    def json_request() -> dict[str, Any]:
        r = httpx.post(f"{server.url}/v1/completions", json=constrained, timeout=120)
        r.raise_for_status()
        return dict(r.json())

    with ThreadPoolExecutor(4) as pool:
        structured = pool.submit(json_request)
        others = [pool.submit(complete, server.url, p) for p in OTHERS[:2]]
        batched = complete(server.url, TARGET)
        assert structured.result()["choices"] and all(f.result() for f in others)
    assert_same_or_near_tie(alone["choices"][0]["logprobs"], batched["choices"][0]["logprobs"])


def test_llama_server_grammar_and_json_schema_fields(server: Server) -> None:
    c = oai(server.url)
    yes_no = c.completions.create(
        model=MODEL,
        prompt="Is water wet? Answer:",
        max_tokens=5,
        temperature=1.0,
        extra_body={"grammar": 'root ::= " yes" | " no"'},
    )
    assert yes_no.choices[0].text in (" yes", " no") and yes_no.choices[0].finish_reason == "stop"
    js = c.completions.create(
        model=MODEL,
        prompt="A user:",
        max_tokens=120,
        temperature=1.0,
        seed=9,
        extra_body={"json_schema": SCHEMA},
    )
    jsonschema.validate(json.loads(js.choices[0].text), SCHEMA)
    with pytest.raises(openai.BadRequestError) as err:
        c.completions.create(
            model=MODEL,
            prompt="x",
            max_tokens=5,
            extra_body={"grammar": 'root ::= "a"', "json_schema": SCHEMA},
        )
    assert "give one" in sent_error(err.value)["message"]
    with pytest.raises(openai.BadRequestError) as err:
        c.completions.create(model=MODEL, prompt="x", max_tokens=5, extra_body={"grammar": "root ::= ("})
    assert sent_error(err.value)["param"] == "grammar"
