"""Tool-call parsing and forcing: pure logic over the formats of the common chat templates."""

from __future__ import annotations

import json

import pytest

from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.server.serving import tools
from llmhost.web.errors import APIError

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def body(**kw: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **kw})


def test_hermes_calls_and_leading_content() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    content, calls = tools.HermesParser().parse(text)
    assert content == "Let me check."
    assert calls == [tools.ParsedCall("get_weather", '{"city": "Paris"}')]


def test_hermes_without_a_call_or_with_broken_json_is_content() -> None:
    assert tools.HermesParser().parse("plain answer") == ("plain answer", [])
    broken = "<tool_call>{not json</tool_call>"
    assert tools.HermesParser().parse(broken) == (broken, [])


def test_llama3_json_and_python_tag() -> None:
    content, calls = tools.Llama3JsonParser().parse('{"name": "f", "parameters": {"x": 1}}; {"name": "g"}')
    assert (
        content is None
        and [c.name for c in calls] == ["f", "g"]
        and json.loads(calls[0].arguments) == {"x": 1}
    )
    _, tagged = tools.Llama3JsonParser().parse('<|python_tag|>{"name": "f", "parameters": {}}')
    assert [c.name for c in tagged] == ["f"]
    assert tools.Llama3JsonParser().parse("Hello") == ("Hello", [])


def test_mistral_tool_calls_list() -> None:
    content, calls = tools.MistralParser().parse(
        '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b"}]'
    )
    assert content is None and [c.name for c in calls] == ["a", "b"]


def test_mistral_named_calls_of_small_3_2() -> None:
    """Mistral Small 3.2's format: `[TOOL_CALLS]NAME[ARGS]{...}` per call, an id optionally between."""
    parser = tools.MistralParser()
    text = 'Checking. [TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}[TOOL_CALLS]now[ARGS]{}'
    content, calls = parser.parse(text)
    assert content == "Checking."
    assert calls == [tools.ParsedCall("get_weather", '{"city": "Paris"}'), tools.ParsedCall("now", "{}")]
    cut = '[TOOL_CALLS]get_weather[ARGS]{"city": '  # max_tokens reached inside the arguments
    assert parser.parse(cut) == (cut, [])
    assert parser.parse("[TOOL_CALLS]f[ARGS]{} and more") == ("[TOOL_CALLS]f[ARGS]{} and more", [])


def test_granite_tool_call_list_after_its_marker() -> None:
    parser = tools.PARSERS["granite"]
    content, calls = parser.parse('<|tool_call|>[{"arguments": {"city": "Paris"}, "name": "get_weather"}]')
    assert content is None and calls == [tools.ParsedCall("get_weather", '{"city": "Paris"}')]
    assert parser.parse("It is sunny.") == ("It is sunny.", [])
    assert parser.hold_from("Sure <|tool") == len("Sure ")


def test_harmony_calls_in_either_header_order_and_the_final_answer() -> None:
    """gpt-oss addresses a call after the channel (`<|channel|>commentary to=functions.f`) or before
    it (`<|start|>assistant to=functions.f<|channel|>commentary json`); `<|call|>` ends generation,
    so the text usually stops before it."""
    parser = tools.HarmonyParser()
    after = (
        "<|channel|>analysis<|message|>Two calls.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    )
    before = '<|start|>assistant to=functions.lookup.v2<|channel|>commentary json<|message|>{"q": 1}'
    content, calls = parser.parse(after + before)
    assert content is None
    assert calls == [
        tools.ParsedCall("get_weather", '{"city": "Paris"}'),
        tools.ParsedCall("lookup.v2", '{"q": 1}'),
    ]
    # the address in the channel header without a content type (llama.cpp's test-chat variants)
    bare = '<|channel|>commentary to=functions.get_weather<|message|>{"city": "Paris"}'
    assert parser.parse(bare) == (None, [tools.ParsedCall("get_weather", '{"city": "Paris"}')])
    final = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi!"
    assert parser.parse(final) == (final, [])  # no call: the text as it is
    assert parser.parse(after.replace('{"city": "Paris"}', "{broken")) == (
        after.replace('{"city": "Paris"}', "{broken"),
        [],
    )
    assert parser.hold_from("Plain <|chan") == len("Plain ")


def test_parser_picked_from_template_markers() -> None:
    assert isinstance(tools.parser_for("auto", "... [TOOL_CALLS] ..."), tools.MistralParser)
    assert isinstance(tools.parser_for("auto", "<|python_tag|>"), tools.Llama3JsonParser)
    assert isinstance(tools.parser_for("auto", "<tool_call>"), tools.HermesParser)
    assert isinstance(tools.parser_for("mistral", "<tool_call>"), tools.MistralParser)
    assert tools.parser_for("auto", "<|tool_call|>") is tools.PARSERS["granite"]
    assert tools.parser_for("auto", "<|channel|>commentary ... <|call|>") is tools.PARSERS["harmony"]


def test_modes() -> None:
    assert tools.mode(body()) == "none"
    assert tools.mode(body(tools=[WEATHER])) == "auto"
    assert tools.mode(body(tools=[WEATHER], tool_choice="none")) == "none"
    assert tools.mode(body(tools=[WEATHER], tool_choice="required")) == "forced"
    with pytest.raises(APIError) as err:
        tools.mode(body(tool_choice="required"))
    assert err.value.field == "tool_choice"


def test_forced_schema_names_the_function_and_closes_arguments() -> None:
    named = body(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    constraint = tools.forced_constraint(named)
    assert constraint is not None
    schema = json.loads(constraint.value)
    item = schema["items"]
    assert schema["maxItems"] == 1 and item["properties"]["name"] == {"const": "get_weather"}
    assert item["properties"]["arguments"]["additionalProperties"] is False
    single = json.loads(
        tools.forced_constraint(  # type: ignore[union-attr]
            body(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)
        ).value
    )
    assert single["maxItems"] == 1
    with pytest.raises(APIError):
        tools.forced_constraint(
            body(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "x"}})
        )


def test_forced_output_read_back_and_a_cut_array_keeps_its_complete_calls() -> None:
    assert tools.forced_calls('[{"name": "f", "arguments": {"a": 1}}]') == [tools.ParsedCall("f", '{"a": 1}')]
    assert tools.forced_calls('[{"name": "f", "argu') == []
    # max_tokens cut the second call: the first is whole and is returned
    cut = '[{"name":"f","arguments":{"a":1}},{"name":"g","argu'
    assert tools.forced_calls(cut) == [tools.ParsedCall("f", '{"a": 1}')]
    assert tools.forced_calls('[{"name":"f","arguments":{}},') == [tools.ParsedCall("f", "{}")]


def test_forced_calls_are_bounded_by_the_tools_offered() -> None:
    """Parallel calls allowed: at most one per tool (a small model otherwise appends calls until
    max_tokens cuts the array)."""
    other = {**WEATHER, "function": {**WEATHER["function"], "name": "get_time"}}
    both = tools.forced_constraint(body(tools=[WEATHER, other], tool_choice="required"))
    assert both is not None and json.loads(both.value)["maxItems"] == 2
    one = tools.forced_constraint(body(tools=[WEATHER], tool_choice="required"))
    assert one is not None and json.loads(one.value)["maxItems"] == 1


def test_template_message_turns_arguments_into_a_mapping() -> None:
    req = body(
        messages=[
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        ]
    )
    out = [tools.template_message(m) for m in req.messages]
    assert out[0]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert out[1] == {"role": "tool", "content": "42", "tool_call_id": "call_1"}


def test_streamed_auto_choice_sends_content_until_a_call_may_start() -> None:
    s = tools.StreamedChoice("auto", tools.HermesParser())
    assert s.feed("Sure, ") == "Sure, "
    assert s.feed("checking <tool") == "checking "  # a partial marker is held
    assert s.feed('_call>{"name": "f", "arguments": {}}') == ""
    rest, calls = s.finish()
    assert rest == "" and [c.name for c in calls] == ["f"]


def test_streamed_auto_choice_without_a_call_releases_held_text() -> None:
    s = tools.StreamedChoice("auto", tools.HermesParser())
    assert s.feed("a < b and <tool") == "a < b and "
    assert s.finish() == ("<tool", [])


def test_streamed_forced_choice_holds_everything() -> None:
    s = tools.StreamedChoice("forced", None)
    assert s.feed('[{"name": "f", ') == ""
    s.feed('"arguments": {}}]')
    assert s.finish() == ("", [tools.ParsedCall("f", "{}")])


def test_integers_are_bounded_as_llama_cpp_bounds_them() -> None:
    """16 digits either way, unless the schema bounds them itself (a small model otherwise spends its
    max_tokens on one number)."""
    from llmhost.server.serving.structured import INTEGER_BOUND, bounded

    schema = {
        "type": "object",
        "properties": {
            "age": {"type": "integer"},
            "n": {"type": ["integer", "null"], "minimum": 0},
            "x": {"type": "integer", "exclusiveMaximum": 5},
            "s": {"type": "string"},
            "list": {"type": "array", "items": {"type": "integer"}},
        },
        "default": {"type": "integer"},
    }
    out = bounded(schema)
    props = out["properties"]
    assert (props["age"]["minimum"], props["age"]["maximum"]) == (-INTEGER_BOUND, INTEGER_BOUND)
    assert props["n"]["minimum"] == 0 and props["n"]["maximum"] == INTEGER_BOUND
    assert "maximum" not in props["x"] and props["x"]["minimum"] == -INTEGER_BOUND
    assert props["s"] == {"type": "string"} and props["list"]["items"]["maximum"] == INTEGER_BOUND
    assert out["default"] == {"type": "integer"}  # an instance, not a schema
    forced = tools.forced_constraint(body(tools=[WEATHER], tool_choice="required"))
    assert forced is not None and str(INTEGER_BOUND) not in forced.value  # no integer in its schema


def test_the_integer_bound_holds_in_the_grammar() -> None:
    """The bound as llguidance compiles it: 17 digits refused either way, the bound itself allowed."""
    import llguidance

    from llmhost.engine.request import ConstraintKind
    from llmhost.engine.sample.constraint import grammar_of
    from llmhost.server.serving.structured import INTEGER_BOUND, schema_constraint

    constraint = schema_constraint({"type": "integer"}, "format")
    grammar, tokenizer = grammar_of(constraint), llguidance.LLTokenizer("byte")

    def allowed(text: str) -> bool:
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        return all(matcher.consume_token(t) for t in tokenizer.tokenize_str(text)) and matcher.is_accepting()

    assert constraint.kind is ConstraintKind.JSON_SCHEMA
    assert allowed(str(INTEGER_BOUND)) and allowed(str(-INTEGER_BOUND)) and allowed("30")
    assert not any(allowed(str(n)) for n in (10**16, -(10**16), INTEGER_BOUND + 1))
