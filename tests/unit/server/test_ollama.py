"""Ollama's requests in llmhost's terms, and its answers' shapes (pure logic; the API itself is tested
with Ollama's clients in tests/integration/test_ollama.py)."""

from __future__ import annotations

import json

import pytest

from llmhost.engine import ConstraintKind
from llmhost.server.protocol import ollama as proto
from llmhost.server.serving import tools
from llmhost.server.serving.apis import ollama_params as op
from llmhost.server.serving.apis.ollama import tool_calls
from llmhost.server.serving.apis.ollama_models import human_count, tagged
from llmhost.server.serving.chat import ChatPlan, StreamedOutput, read_message
from llmhost.server.serving.chat_template import ChatTemplate
from llmhost.web.errors import APIError
from llmhost.web.formats import ollama_error


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("-1", -1.0),
        (-1, -1.0),
        (0, 0.0),
        ("0", 0.0),
        ("250ms", 0.25),
        (30, 30.0),
        ("1.5h", 5400.0),
    ],
)
def test_keep_alive_reads_go_durations_and_seconds(value: proto.KeepAlive, seconds: float | None) -> None:
    assert proto.keep_alive_seconds(value) == seconds


def test_keep_alive_that_is_no_duration_is_a_400() -> None:
    with pytest.raises(APIError) as err:
        proto.keep_alive_seconds("soon")
    assert err.value.status == 400 and err.value.field == "keep_alive"


def test_options_map_onto_sampling_with_ollamas_defaults() -> None:
    params = op.sampling(None, 10, 1024, None)
    assert (params.temperature, params.top_k, params.top_p, params.repetition_penalty) == (0.8, 40, 0.9, 1.1)
    assert params.penalty_last_n == 64 and params.max_tokens == 10
    given = proto.Options(
        temperature=0,
        top_k=5,
        min_p=0.1,
        repeat_penalty=1.3,
        repeat_last_n=-1,
        seed=3,
        stop=["\n"],
        presence_penalty=0.5,
        frequency_penalty=0.25,
    )
    params = op.sampling(given, 10, 1024, None)
    assert (params.temperature, params.top_k, params.min_p, params.repetition_penalty) == (0, 5, 0.1, 1.3)
    assert params.penalty_last_n == 1024 and params.seed == 3 and params.stop == ["\n"]
    assert (params.presence_penalty, params.frequency_penalty) == (0.5, 0.25)


def test_options_that_mean_off_are_the_only_values_taken() -> None:
    op.sampling(proto.Options(mirostat=0, tfs_z=1.0, penalize_newline=True, num_keep=4), 4, 64, None)
    with pytest.raises(APIError) as err:
        op.sampling(proto.Options(penalize_newline=False), 4, 64, None)
    assert err.value.field == "options.penalize_newline"
    for bad in ({"mirostat": 2}, {"mirostat": False}, {"tfs_z": 0.9}):
        with pytest.raises(ValueError):
            proto.Options.model_validate(bad)


def test_num_predict_and_num_ctx_bound_the_generation() -> None:
    assert op.max_tokens(None, 100, 1024) == 924
    assert op.max_tokens(proto.Options(num_predict=-1), 100, 1024) == 924
    assert op.max_tokens(proto.Options(num_predict=16), 100, 1024) == 16
    assert op.max_tokens(proto.Options(num_predict=16, num_ctx=110), 100, 1024) == 10
    with pytest.raises(APIError) as err:
        op.check_context(proto.Options(num_ctx=4096), 1024)
    assert err.value.field == "options.num_ctx" and err.value.extra["limit"] == 1024
    with pytest.raises(APIError):
        op.max_tokens(proto.Options(num_ctx=50), 100, 1024)


def test_load_options_are_refused_naming_the_serve_setting() -> None:
    with pytest.raises(APIError) as err:
        op.check_options({"options": {"num_thread": 8}})
    assert err.value.field == "options.num_thread" and "--threads" in err.value.message
    op.check_options({"options": {"num_thread": None, "temperature": 0.1}})


def test_format_is_json_mode_or_a_schema() -> None:
    assert op.constraint(None) is None and op.constraint("") is None
    json_mode = op.constraint("json")
    assert json_mode is not None and json_mode.kind is ConstraintKind.JSON_OBJECT
    schema = op.constraint({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert schema is not None and schema.kind is ConstraintKind.JSON_SCHEMA and schema.field == "format"
    assert json.loads(schema.value)["additionalProperties"] is False


def test_thinking_and_tools_are_capabilities_of_the_template() -> None:
    assert op.think_ask(False, "m", thinks=False).enabled is None  # what such a model does anyway
    assert op.think_ask(None, "m", thinks=False).enabled is None
    for think in (True, "high"):
        with pytest.raises(APIError) as err:
            op.think_ask(think, "m", thinks=False)
        assert err.value.message == '"m" does not support thinking'
    assert op.think_ask(False, "m", thinks=True).enabled is False
    high = op.think_ask("high", "m", thinks=True)
    assert (high.enabled, high.effort, high.field) == (True, "high", "think")
    assert op.supports_thinking("{% if enable_thinking %}<think>{% endif %}", "auto")
    assert not op.supports_thinking("{% if enable_thinking %}<think>{% endif %}", "none")
    assert not op.supports_thinking("{{ messages }}", "auto")
    plain = ChatTemplate("{{ messages }}", "", "")
    shows = ChatTemplate("{{ messages }}{{ tools }}", "", "")
    tool = [proto.Tool(function=proto.FunctionDef(name="f"))]
    op.check_tools(tool, "m", plain, "auto")  # the generic format shows them
    op.check_tools(tool, "m", shows, "none")  # the template does
    with pytest.raises(APIError) as err:
        op.check_tools(tool, "m", plain, "none")
    assert err.value.message == '"m" does not support tools' and err.value.field == "tools"


def test_images_go_where_ollama_puts_them() -> None:
    """At each [img] in order; those without one before the text."""
    m = "<__media__>"
    assert op.with_images("what is this?", 2) == f"{m}{m}what is this?"
    assert op.with_images("compare [img] with [img]", 2) == f"compare {m} with {m}"
    assert op.with_images("compare [img] with", 2) == f"{m}compare {m} with"
    assert op.with_images("no images [img]", 0) == "no images [img]"


def test_messages_carry_calls_and_results_to_the_template() -> None:
    messages = [
        proto.Message(role="user", content="weather?"),
        proto.Message(
            role="assistant",
            tool_calls=[
                proto.ToolCall(
                    function=proto.ToolFunctionCall(name="get_weather", arguments={"city": "Paris"})
                )
            ],
        ),
        proto.Message(role="tool", content="18C", tool_name="get_weather"),
    ]
    out = op.chat_messages(messages)
    call = (out[1].tool_calls or [])[0]
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert out[2].tool_call_id == call.id and out[2].name == "get_weather"


def test_parsed_calls_become_ollamas_tool_calls() -> None:
    plan = ChatPlan("auto", tools.PARSERS["hermes"])
    text = 'Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    reply = read_message(plan, text)
    calls = reply.calls
    found = tool_calls(calls)
    assert reply.content == "Sure." and reply.reasoning is None and found is not None
    assert found[0]["function"] == {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}
    assert tool_calls([tools.ParsedCall("f", "[1]")]) is None  # no object: the text stays content
    streamed = StreamedOutput(plan)
    _, sent, _ = streamed.feed(text[:10], False)
    _, rest, streamed_calls = streamed.feed(text[10:], True)
    assert sent + rest == "Sure." and streamed_calls == calls


def test_errors_take_ollamas_shape_and_status() -> None:
    status, body = ollama_error(422, {"error": {"message": "bad", "type": "x", "field": "options.top_p"}})
    assert status == 400 and body == {"error": "bad", "field": "options.top_p"}
    assert ollama_error(404, {"error": "gone"}) == (404, {"error": "gone"})  # relayed as it is


def test_names_and_sizes_as_ollama_writes_them() -> None:
    assert tagged("smol") == "smol:latest" and tagged("smol:q4") == "smol:q4"
    assert tagged("me/model") == "me/model:latest"
    assert human_count(134_515_008) == "134.52M" and human_count(7_615_616_512) == "7.6B"
