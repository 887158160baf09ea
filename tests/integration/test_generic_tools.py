"""Tools on a chat template that shows none (SmolLM2 135M Instruct's own): the generic format describes
them in a system message, forces a call under `tool_choice` "required" or a named function and reads
it back as `tool_calls`, and renders a conversation's calls and results, on every API that takes tools,
through the official clients; `--tool-format none` refuses tools there instead. SmolLM2 135M's answers
are not judged: what is checked is the structure (calls that parse and follow the schema) and that
every turn renders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from tests.integration.conftest import SMOLLM2, Server, start_server, stop_server
from tests.sdk_errors import sent_error

MODEL = "smol"
CITY: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
WEATHER: Any = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather forecast of a city", "parameters": CITY},
}
TIME: Any = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris for 2 days?"}]
LIMITS = ("--max-concurrent", "2", "--max-input-tokens", "768", "--max-total-tokens", "1024")


@pytest.fixture(scope="module")
def smol(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("generic"), str(SMOLLM2), "--served-model-name", MODEL, *LIMITS
    )
    yield srv
    stop_server(srv)


def oai(srv: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=120, max_retries=0)


def claude(srv: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key="unused", timeout=120, max_retries=0)


def test_the_tools_reach_the_prompt_in_a_system_message(smol: Server) -> None:
    c = oai(smol)
    bare = c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1)
    offered = c.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], max_tokens=1)
    assert bare.usage and offered.usage
    # the description and the schema, where the template alone showed nothing of them
    assert offered.usage.prompt_tokens > bare.usage.prompt_tokens + 40


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_call_parses_into_tool_calls_following_the_schema(smol: Server, choice: Any) -> None:
    r = oai(smol).chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=[WEATHER, TIME] if choice == "required" else [WEATHER],
        tool_choice=choice,
        parallel_tool_calls=False,
        max_tokens=60,
        temperature=0,
    )
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    [call] = ch.message.tool_calls or []
    assert call.function.name in ("get_weather", "get_time")  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    if call.function.name == "get_weather":  # type: ignore[union-attr]
        jsonschema.validate(arguments, CITY)


def test_a_forced_call_streams_as_tool_call_deltas(smol: Server) -> None:
    chunks = list(
        oai(smol).chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=60,
            temperature=0,
            stream=True,
        )
    )
    calls = [t for ch in chunks if ch.choices for t in ch.choices[0].delta.tool_calls or []]
    assert [t.function.name for t in calls if t.function] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0].function.arguments or ""), CITY)  # type: ignore[union-attr]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_auto_answers_text_or_a_call(smol: Server) -> None:
    r = oai(smol).chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="auto", max_tokens=12, temperature=0
    )
    message = r.choices[0].message
    assert message.content or message.tool_calls
    for call in message.tool_calls or []:
        assert call.function.name == "get_weather" and json.loads(call.function.arguments)  # type: ignore[union-attr]


def test_a_tool_result_turn_renders_and_answers(smol: Server) -> None:
    c = oai(smol)
    first = c.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=60, temperature=0
    )
    [call] = first.choices[0].message.tool_calls or []
    follow: Any = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, then rain"},
    ]
    answer = c.chat.completions.create(
        model=MODEL, messages=follow, tools=[WEATHER], max_tokens=8, temperature=0
    )
    assert answer.choices[0].message.content or answer.choices[0].message.tool_calls
    assert answer.usage and first.usage and answer.usage.prompt_tokens > first.usage.prompt_tokens + 8
    # without tools offered, the history still renders
    again = c.chat.completions.create(model=MODEL, messages=follow, max_tokens=4, temperature=0)
    assert again.choices[0].message.content is not None


def test_anthropic_messages_force_a_tool_use_and_take_its_result(smol: Server) -> None:
    tool: Any = {"name": "get_weather", "description": "The weather forecast of a city", "input_schema": CITY}
    c = claude(smol)
    m = c.messages.create(
        model=MODEL,
        max_tokens=60,
        messages=ASK,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    [use] = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and use.name == "get_weather"  # type: ignore[union-attr]
    jsonschema.validate(use.input, CITY)  # type: ignore[union-attr]
    follow: Any = [
        *ASK,
        {"role": "assistant", "content": m.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 degrees"}],
        },  # type: ignore[union-attr]
    ]
    answer = c.messages.create(model=MODEL, max_tokens=8, messages=follow, tools=[tool])
    assert answer.content and answer.usage.input_tokens > m.usage.input_tokens
    counted = c.messages.count_tokens(model=MODEL, messages=follow, tools=[tool])
    assert counted.input_tokens == answer.usage.input_tokens


def test_responses_force_a_function_call_and_take_its_output(smol: Server) -> None:
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": CITY}]
    c = oai(smol)
    r = c.responses.create(
        model=MODEL,
        input=ASK,
        tools=tools,
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=60,
        temperature=0,
    )
    [call] = [item for item in r.output if item.type == "function_call"]
    jsonschema.validate(json.loads(call.arguments), CITY)  # type: ignore[union-attr]
    follow: Any = [
        *ASK,
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},  # type: ignore[union-attr]
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees"},  # type: ignore[union-attr]
    ]
    answer = c.responses.create(model=MODEL, input=follow, tools=tools, max_output_tokens=16, temperature=0)
    assert answer.status in ("completed", "incomplete") and answer.output


def test_ollama_chat_takes_tools_and_a_history_of_calls(smol: Server) -> None:
    client = ollama.Client(host=smol.url, timeout=120)
    bare = client.chat(model=MODEL, messages=ASK, options={"num_predict": 1})
    offered = client.chat(model=MODEL, messages=ASK, tools=[WEATHER], options={"num_predict": 1})
    assert offered.prompt_eval_count and bare.prompt_eval_count
    assert offered.prompt_eval_count > bare.prompt_eval_count + 40
    call = {"function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}
    history = [
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"},
    ]
    answer = client.chat(
        model=MODEL, messages=history, tools=[WEATHER], options={"num_predict": 8, "temperature": 0}
    )
    assert answer.done and answer.prompt_eval_count and answer.prompt_eval_count > offered.prompt_eval_count
    assert "tools" in (client.show(MODEL).capabilities or [])


def test_tool_format_none_refuses_tools_naming_them(tmp_path_factory: pytest.TempPathFactory) -> None:
    srv = start_server(
        tmp_path_factory.mktemp("none"),
        str(SMOLLM2),
        "--served-model-name",
        MODEL,
        "--tool-format",
        "none",
        *LIMITS,
    )
    try:
        c = oai(srv)
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], max_tokens=4)
        assert (
            sent_error(err.value)["param"] == "tools"
            and "--tool-format none" in sent_error(err.value)["message"]
        )
        with pytest.raises(openai.BadRequestError) as err:
            c.responses.create(
                model=MODEL, input="hi", tools=[{"type": "function", "name": "f", "parameters": {}}]
            )
        assert sent_error(err.value)["param"] == "tools"
        tool: Any = {"name": "get_weather", "input_schema": CITY}
        with pytest.raises(anthropic.BadRequestError) as bad:
            claude(srv).messages.create(model=MODEL, max_tokens=4, messages=ASK, tools=[tool])
        assert sent_error(bad.value)["field"] == "tools"
        client = ollama.Client(host=srv.url, timeout=120)
        with pytest.raises(ollama.ResponseError) as refused:
            client.chat(model=MODEL, messages=ASK, tools=[WEATHER])
        assert (refused.value.status_code, refused.value.error) == (400, f'"{MODEL}" does not support tools')
        assert "tools" not in (client.show(MODEL).capabilities or [])
        # without tools, the same requests answer
        assert c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=2).choices
        r = httpx.post(
            f"{srv.url}/api/chat",
            json={"model": MODEL, "messages": ASK, "stream": False, "options": {"num_predict": 2}},
            timeout=60,
        )
        assert r.status_code == 200, r.text
    finally:
        stop_server(srv)
