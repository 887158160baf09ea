"""Anthropic's Messages API and OpenAI's Responses API with their official clients, unchanged, against
`llmhost serve` of an instruct model (SmolLM2, its own chat template) and through `llmhost endpoint`."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.integration.conftest import SMOLLM2, Server, start_server, stop_server
from tests.integration.endpoint_helpers import start_endpoint, stop_endpoint
from tests.sdk_errors import sent_error
from tests.tinymmproj import png, random_pixels

MODEL = "smol"
WEATHER_SCHEMA: dict[str, Any] = {  # no additionalProperties: llmhost closes undeclared ones
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}
CLOSED_WEATHER = {**WEATHER_SCHEMA, "additionalProperties": False}
PERSON: dict[str, Any] = {  # as instructor's Mode.JSON_SCHEMA sends it: neither strict nor closed
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}
PNG = base64.b64encode(png(random_pixels())).decode()  # an image, for a text model to refuse


@pytest.fixture(scope="module")
def smol(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("smol"),
        str(SMOLLM2),
        "--served-model-name",
        MODEL,
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
def smol_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yaml_text = f"""
name: agents
instance: {{type: local, price_per_hour: 0.1}}
components:
  - name: {MODEL}
    model: {SMOLLM2}
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {{max_input_tokens: 768, max_total_tokens: 1024, max_concurrent: 4}}
    startup_health_check_timeout_s: 90
"""
    ep = start_endpoint(tmp_path_factory.mktemp("agents"), yaml_text)
    yield ep.url
    stop_endpoint(ep)


@pytest.fixture(params=["serve", "endpoint"])
def url(request: pytest.FixtureRequest, smol: Server) -> str:
    if request.param == "serve":
        return smol.url
    return str(request.getfixturevalue("smol_endpoint"))


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", timeout=120, max_retries=0)


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)


# -- Anthropic Messages --------------------------------------------------------------------------------
def test_messages_create_and_stream_with_its_accumulator(url: str) -> None:
    c = claude(url)
    m = c.messages.create(
        model=MODEL, max_tokens=12, messages=ASK, system="Answer briefly.", extra_body=GREEDY
    )
    assert m.id.startswith("msg_") and m.role == "assistant" and m.model == MODEL
    assert m.content and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens") and 0 < m.usage.output_tokens <= 12
    assert (
        m.usage.input_tokens
        == c.messages.count_tokens(model=MODEL, messages=ASK, system="Answer briefly.").input_tokens
    )
    with c.messages.stream(
        model=MODEL, max_tokens=12, messages=ASK, system="Answer briefly.", extra_body=GREEDY
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert pieces and final.content[0].type == "text" and final.content[0].text == "".join(pieces)
    assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0
    assert final.usage.input_tokens == m.usage.input_tokens


def test_messages_stop_sequence(url: str) -> None:
    stops = [" ", "\n", ".", "!"]
    m = claude(url).messages.create(
        model=MODEL, max_tokens=30, messages=ASK, stop_sequences=stops, extra_body=GREEDY
    )
    assert m.stop_reason == "stop_sequence" and m.stop_sequence in stops


def test_messages_forced_tool_call_validates_and_tool_result_round_trip(url: str) -> None:
    c = claude(url)
    tool: Any = {
        "name": "get_weather",
        "description": "Current weather of a city",
        "input_schema": WEATHER_SCHEMA,
    }
    m = c.messages.create(
        model=MODEL,
        max_tokens=60,
        messages=ASK,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert m.stop_reason == "tool_use"
    use = m.content[-1]
    assert use.type == "tool_use" and use.name == "get_weather" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, CLOSED_WEATHER)
    with c.messages.stream(
        model=MODEL, max_tokens=60, messages=ASK, tools=[tool], tool_choice={"type": "any"}
    ) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_reason == "tool_use" and streamed.content[-1].type == "tool_use"
    jsonschema.validate(streamed.content[-1].input, CLOSED_WEATHER)
    follow: Any = [
        *ASK,
        {"role": "assistant", "content": m.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21 degrees, sunny"}],
        },
    ]
    answer = c.messages.create(model=MODEL, max_tokens=16, messages=follow, tools=[tool], extra_body=GREEDY)
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use") and answer.content


def test_messages_errors_are_the_sdks_typed_exceptions(url: str) -> None:
    c = claude(url)
    with pytest.raises(anthropic.BadRequestError) as err:
        c.messages.create(
            model=MODEL, max_tokens=4, messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024}
        )
    assert err.value.body["type"] == "error"  # type: ignore[index]
    assert err.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "thinking" in sent_error(err.value)["message"]
    image: Any = [
        {
            "role": "user",
            "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
            ],
        }
    ]
    with pytest.raises(anthropic.BadRequestError) as err:
        c.messages.create(model=MODEL, max_tokens=4, messages=image)
    refused = sent_error(err.value)
    assert "text only" in refused["message"] and refused["field"] == "messages.0.content.0.source.data"
    with pytest.raises(anthropic.BadRequestError) as err:
        c.messages.create(model=MODEL, max_tokens=100_000, messages=ASK)
    over = sent_error(err.value)
    # Anthropic's field and the server's flag, never TGI's words (`max new tokens`, MAX_TOTAL_TOKENS)
    assert over["field"] == "max_tokens" and over["value"] > over["limit"]
    assert "max_tokens 100000" in over["message"] and "(--max-total-tokens)" in over["message"]
    assert "MAX_TOTAL_TOKENS" not in over["message"] and "new tokens" not in over["message"]


def test_messages_unknown_model_through_the_endpoint_is_not_found(smol_endpoint: str) -> None:
    with pytest.raises(anthropic.NotFoundError) as err:
        claude(smol_endpoint).messages.create(model="nope", max_tokens=4, messages=ASK)
    assert err.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


# -- OpenAI Responses ----------------------------------------------------------------------------------
def test_responses_create_and_stream(url: str) -> None:
    c = oai(url)
    r = c.responses.create(
        model=MODEL, input="Say hello.", instructions="Answer briefly.", max_output_tokens=12, temperature=0
    )
    assert r.id.startswith("resp_") and r.status in ("completed", "incomplete") and r.output_text
    assert r.usage is not None and 0 < r.usage.output_tokens <= 12
    if r.status == "incomplete":
        assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"
    events = list(
        c.responses.create(model=MODEL, input="Say hello.", max_output_tokens=12, temperature=0, stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert text and final.output_text == text


def test_responses_include_empty_and_logprobs(smol: Server) -> None:
    """The OpenAI Agents SDK sends `include: []` on every call (nothing asked), and
    `message.output_text.logprobs` when logprobs are on: served in the text part and the stream."""
    c = oai(smol.url)
    plain = c.responses.create(
        model=MODEL, input="Say hello.", max_output_tokens=6, temperature=0, include=[]
    )
    assert plain.output_text and plain.output[0].content[0].logprobs == []  # type: ignore[union-attr]
    asked = c.responses.create(
        model=MODEL,
        input="Say hello.",
        max_output_tokens=6,
        temperature=0,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    part = asked.output[0].content[0]  # type: ignore[union-attr]
    assert asked.output_text == plain.output_text and part.logprobs  # type: ignore[union-attr]
    assert "".join(lp.token for lp in part.logprobs) == asked.output_text  # type: ignore[union-attr]
    assert all(lp.logprob <= 0 and len(lp.top_logprobs) == 2 for lp in part.logprobs)  # type: ignore[union-attr]
    events = list(
        c.responses.create(
            model=MODEL,
            input="Say hello.",
            max_output_tokens=6,
            temperature=0,
            include=["message.output_text.logprobs"],
            stream=True,
        )
    )
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert sum(len(e.logprobs) for e in deltas) == len(part.logprobs)  # type: ignore[union-attr]
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model=MODEL, input="Hi", include=["file_search_call.results"])
    assert str(sent_error(err.value)["param"]).startswith("include")


def test_responses_function_call_and_output_round_trip(url: str) -> None:
    c = oai(url)
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": WEATHER_SCHEMA,
        }
    ]
    r = c.responses.create(
        model=MODEL,
        input=ASK,
        tools=tools,
        tool_choice="required",  # type: ignore[arg-type]
        parallel_tool_calls=False,
        max_output_tokens=60,
    )
    calls = [item for item in r.output if item.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), CLOSED_WEATHER)
    follow: Any = [
        *ASK,
        calls[0],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "21 degrees, sunny"},
    ]
    answer = c.responses.create(model=MODEL, input=follow, tools=tools, max_output_tokens=16, temperature=0)
    assert answer.output and answer.usage is not None and answer.usage.input_tokens > r.usage.input_tokens  # type: ignore[union-attr]
    streamed = list(
        c.responses.create(
            model=MODEL,
            input=ASK,
            tools=tools,  # type: ignore[arg-type]
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=60,
            stream=True,
        )
    )
    done = [e for e in streamed if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and streamed[-1].type == "response.completed"
    jsonschema.validate(json.loads(done[0].arguments), CLOSED_WEATHER)


def test_responses_text_format_json_schema_closes_undeclared_properties(url: str) -> None:
    r = oai(url).responses.create(
        model=MODEL,
        input="Describe a person as JSON.",
        max_output_tokens=60,
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON}},
    )
    assert r.status == "completed", r.output_text
    jsonschema.validate(json.loads(r.output_text), {**PERSON, "additionalProperties": False})


def test_chat_response_format_closes_undeclared_properties_too(smol: Server) -> None:
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    r = oai(smol.url).chat.completions.create(
        model=MODEL,
        max_tokens=60,
        response_format=fmt,
        messages=[{"role": "user", "content": "A person as JSON"}],
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(
        json.loads(r.choices[0].message.content or ""), {**PERSON, "additionalProperties": False}
    )


def test_responses_refusals_name_the_field(url: str) -> None:
    c = oai(url)
    for kwargs, field in (
        ({"store": True}, "store"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"reasoning": {"effort": "low"}}, "reasoning"),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            c.responses.create(model=MODEL, input="Hi", max_output_tokens=2, **kwargs)  # type: ignore[call-overload]
        assert str(sent_error(err.value)["param"]).startswith(field)


# -- bad input, load, metrics (raw HTTP) ---------------------------------------------------------------
MESSAGE = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/messages", {k: v for k, v in MESSAGE.items() if k != "max_tokens"}, "max_tokens"),
    ("/v1/messages", {**MESSAGE, "max_tokens": 0}, "max_tokens"),
    ("/v1/messages", {**MESSAGE, "messages": []}, "messages"),
    ("/v1/messages", {**MESSAGE, "temperature": 1.5}, "temperature"),
    ("/v1/messages", {**MESSAGE, "messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ("/v1/messages", {**MESSAGE, "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
    (
        "/v1/messages",
        {**MESSAGE, "tools": [{"name": "t", "input_schema": {}, "type": "bash_20250124"}]},
        "tools",
    ),
    (
        "/v1/messages",
        {**MESSAGE, "messages": [{"role": "user", "content": [{"type": "document"}]}]},
        "messages.0.content.0.type",
    ),
    ("/v1/messages/count_tokens", {"model": MODEL}, "messages"),
    ("/v1/messages/count_tokens", {**MESSAGE}, "max_tokens"),
    ("/v1/responses", {"model": MODEL}, "input"),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 100_000}, "max_output_tokens"),
    ("/v1/responses", {"input": "Hi", "tools": [{"type": "web_search"}]}, "tools"),
    ("/v1/responses", {"input": "Hi", "text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
    ("/v1/responses", {"input": [{"type": "web_search_call"}]}, "input.0.type"),
    ("/v1/responses", {"input": [{"type": "reasoning"}]}, "input.0"),
    ("/v1/responses", {"input": "Hi", "tool_choice": "required"}, "tool_choice"),
]


@pytest.mark.parametrize(("route", "body", "field"), BAD, ids=[f"{r}:{f}" for r, _, f in BAD])
def test_bad_input_is_4xx_json_naming_the_field(
    smol: Server, route: str, body: dict[str, Any], field: str
) -> None:
    r = httpx.post(f"{smol.url}{route}", json=body, timeout=60)
    assert 400 <= r.status_code < 500, r.text
    error = r.json()["error"]
    if route.startswith("/v1/messages"):
        assert (
            r.status_code == 400 and r.json()["type"] == "error" and error["type"] == "invalid_request_error"
        )
    assert field in error["message"] or error.get("field", "").startswith(field), r.text


def test_refused_for_load_with_retry_after(small_server: Server) -> None:
    """Two requests fill the small server (one running, one queued): the next is refused at once, as
    Anthropic's 529 overloaded_error on /v1/messages and the usual 429 on /v1/responses."""
    body = {"prompt": "Count:", "max_tokens": 30, "ignore_eos": True, "stream": True}
    with (
        httpx.Client(base_url=small_server.url, timeout=120) as c,
        c.stream("POST", "/v1/completions", json=body) as first,
        c.stream("POST", "/v1/completions", json=body) as second,
    ):
        assert first.status_code == second.status_code == 200
        m = c.post("/v1/messages", json={**MESSAGE, "model": "x"})
        assert m.status_code == 529 and m.headers["retry-after"] == "1"
        assert m.json()["type"] == "error" and m.json()["error"]["type"] == "overloaded_error"
        r = c.post("/v1/responses", json={"input": "Hi"})
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        for s in (first, second):
            s.read()


def test_counted_per_api_in_metrics(smol: Server) -> None:
    def done(api: str) -> float:
        text = httpx.get(f"{smol.url}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("llmhost_requests_total{") and f'api="{api}"' in line
        )

    before = (done("messages"), done("responses"))
    with ThreadPoolExecutor(2) as pool:
        list(
            pool.map(
                lambda f: f(),
                [
                    lambda: httpx.post(
                        f"{smol.url}/v1/messages", json=MESSAGE, timeout=60
                    ).raise_for_status(),
                    lambda: httpx.post(
                        f"{smol.url}/v1/responses", json={"input": "Hi", "max_output_tokens": 2}, timeout=60
                    ).raise_for_status(),
                ],
            )
        )
    assert (done("messages"), done("responses")) == (before[0] + 1, before[1] + 1)


@pytest.fixture
def one_slot(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(
        tmp_path,
        str(SMOLLM2),
        "--max-concurrent",
        "1",
        "--max-input-tokens",
        "64",
        "--max-total-tokens",
        "1024",
        "--queue-timeout-s",
        "0.5",
    )
    yield srv
    stop_server(srv)


def test_a_failure_mid_stream_is_the_apis_error_event(one_slot: Server) -> None:
    """A stream whose request times out in the queue has already begun: it ends with Anthropic's
    `error` event (the SDK raises) and the Responses API's `response.failed`."""
    long = {"prompt": "Count:", "max_tokens": 900, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{one_slot.url}/v1/completions", json=long, timeout=120) as running:
        lines = running.iter_lines()  # kept: the request holds the only slot until this stream closes
        while not next(lines).startswith("data: {"):
            pass
        with pytest.raises(anthropic.APIStatusError) as err:  # noqa: SIM117
            with claude(one_slot.url).messages.stream(model=MODEL, max_tokens=4, messages=ASK) as stream:
                stream.get_final_message()
        assert "queue timeout" in err.value.body["error"]["message"]  # type: ignore[index]
        events = list(oai(one_slot.url).responses.create(model=MODEL, input="Hi", stream=True))
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.status == "failed" and failed.error is not None
    assert "queue timeout" in failed.error.message
