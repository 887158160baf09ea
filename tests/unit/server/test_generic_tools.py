"""The generic tool format of templates that show no tools: the system message describing the tools,
the conversation's calls and results as text, and the parser reading a leading JSON call back."""

from __future__ import annotations

import json

import pytest

from llmhost.server.serving.chat_template import TemplateMessage
from llmhost.server.serving.generic_tools import conversation, describe
from llmhost.server.serving.tools import GenericParser, ParsedCall, StreamedChoice
from llmhost.shared.jsontypes import JSONObject

CITY: JSONObject = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER: JSONObject = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather of a city", "parameters": CITY},
}
TIME: JSONObject = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
PARSER = GenericParser(frozenset({"get_weather", "get_time"}))


def test_the_description_names_each_tool_its_schema_and_how_to_call() -> None:
    text = describe([WEATHER, TIME])
    assert "- get_weather: The weather of a city" in text and "- get_time: (no description)" in text
    assert json.dumps(CITY) in text
    assert '{"name": "<tool name>", "arguments": {<its arguments>}}' in text


def test_the_tools_join_the_first_system_message_or_come_first() -> None:
    ask: list[TemplateMessage] = [{"role": "user", "content": "hi"}]
    first = conversation(ask, [WEATHER])
    assert [m["role"] for m in first] == ["system", "user"] and "get_weather" in first[0]["content"]
    merged = conversation([{"role": "system", "content": "Be brief."}, *ask], [WEATHER])
    assert [m["role"] for m in merged] == ["system", "user"]
    assert merged[0]["content"].startswith("Be brief.\n\nYou can call these tools:")


def test_calls_and_results_become_text_and_results_join_the_next_question() -> None:
    paris = {"name": "get_weather", "arguments": {"city": "Paris"}}
    call = {"id": "c1", "type": "function", "function": paris}
    other = {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": {}}}
    messages: list[TemplateMessage] = [
        {"role": "user", "content": "Weather and time in Paris?", "name": "ann"},
        {"role": "assistant", "content": "", "tool_calls": [call, other], "reasoning_content": "hmm"},  # type: ignore[list-item]
        {"role": "tool", "content": "18 C", "tool_call_id": "c1"},
        {"role": "tool", "content": "noon", "tool_call_id": "c2", "name": "get_time"},
        {"role": "user", "content": "Thanks. And tomorrow?"},
    ]
    out = conversation(messages, None)
    assert out[0] == messages[0]  # a turn with nothing of tools stays as it is
    assert out[1] == {
        "role": "assistant",
        "content": json.dumps(
            [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]
        ),
        "reasoning_content": "hmm",
    }
    assert out[2:] == [
        {
            "role": "user",
            "content": "Result of the tool call get_weather:\n18 C\n\nResult of the tool call get_time:\nnoon"
            "\n\nThanks. And tomorrow?",
        }
    ]


def test_a_conversation_without_tools_is_left_as_it_is() -> None:
    messages: list[TemplateMessage] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert conversation(messages, None) == messages


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('{"name": "get_weather", "arguments": {"city": "Paris"}}', [("get_weather", {"city": "Paris"})]),
        (' ```json\n{"name": "get_time", "arguments": {}}\n``` then more', [("get_time", {})]),
        (
            '[{"name": "get_time", "arguments": {}}, {"name": "get_weather", "parameters": {"city": "X"}}]',
            [("get_time", {}), ("get_weather", {"city": "X"})],
        ),
    ],
)
def test_a_leading_call_is_read_back(text: str, calls: list[tuple[str, JSONObject]]) -> None:
    content, found = PARSER.parse(text)
    assert content is None
    assert [(c.name, json.loads(c.arguments)) for c in found] == calls


@pytest.mark.parametrize(
    "text",
    [
        "Paris is sunny.",
        '{"name": "Paris", "arguments": {}}',  # JSON, but no tool of the request's
        '{"city": "Paris"}',
        '{"name": "get_time", "arguments": {}',  # cut short
        "[1] is a footnote",
        'The call is {"name": "get_time", "arguments": {}}',  # not leading: prose about a call
    ],
)
def test_anything_else_is_content(text: str) -> None:
    assert PARSER.parse(text) == (text, [])


def test_streamed_prose_goes_out_at_once_and_a_call_is_held_back() -> None:
    prose = StreamedChoice("auto", PARSER)
    assert prose.feed("Sunny") == "Sunny" and prose.finish() == ("", [])
    call = StreamedChoice("auto", PARSER)
    assert call.feed(' {"name": "get_time",') == "" and call.feed(' "arguments": {}}') == ""
    assert call.finish() == ("", [ParsedCall("get_time", "{}")])
