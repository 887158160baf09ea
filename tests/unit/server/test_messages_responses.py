"""Anthropic Messages and OpenAI Responses adapters: pure logic (requests put in chat terms, event
sequences in the documented order, Anthropic's error shape, schemas closed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmhost.engine import FinishReason, GenerationEvent
from llmhost.server.protocol import anthropic as ap
from llmhost.server.protocol import responses as rp
from llmhost.server.serving.apis import anthropic as aserving
from llmhost.server.serving.apis import responses as rserving
from llmhost.server.serving.apis.anthropic_events import MessageEvents
from llmhost.server.serving.apis.responses_events import ResponseEvents, ResponseShape
from llmhost.server.serving.structured import closed
from llmhost.server.serving.tools import ParsedCall
from llmhost.web.errors import APIError
from llmhost.web.formats import anthropic_error, is_anthropic

# Anthropic's documented stream: https://docs.anthropic.com/en/docs/build-with-claude/streaming
ANTHROPIC_ORDER = [
    "message_start",
    "ping",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]


def parse_sse(lines: list[str]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in "".join(lines).split("\n\n"):
        if not chunk.strip():
            continue
        head, data = chunk.split("\n", 1)
        assert head.startswith("event: ") and data.startswith("data: ")
        payload = json.loads(data[len("data: ") :])
        assert payload["type"] == head[len("event: ") :]
        out.append((head[len("event: ") :], payload))
    return out


# -- Anthropic -----------------------------------------------------------------------------------------
def test_anthropic_stream_text_then_tool_use_in_documented_order() -> None:
    ev = MessageEvents("msg_1", "m", 7)
    lines = [ev.start(), *ev.text("Hel"), *ev.text(""), *ev.text("lo")]
    use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}
    lines += list(ev.finish([use], "tool_use", None, 5))
    events = parse_sse(lines)
    names = [n for n, _ in events]
    assert names == [*ANTHROPIC_ORDER[:4], "content_block_delta", *ANTHROPIC_ORDER[4:]]
    start = events[0][1]["message"]
    assert start["usage"] == {"input_tokens": 7, "output_tokens": 0} and start["content"] == []
    assert [p["index"] for n, p in events if n.startswith("content_block")] == [0, 0, 0, 0, 1, 1, 1]
    assert events[6][1]["content_block"] == {**use, "input": {}}
    assert json.loads(events[7][1]["delta"]["partial_json"]) == {"a": 1}
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"] == {"output_tokens": 5}


def test_anthropic_stream_without_text_has_no_text_block() -> None:
    ev = MessageEvents("msg_1", "m", 1)
    names = [n for n, _ in parse_sse([ev.start(), *ev.finish([], "max_tokens", None, 3)])]
    assert names == ["message_start", "ping", "message_delta", "message_stop"]


def request(**kw: Any) -> ap.MessagesRequest:
    return ap.MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **kw}
    )


def test_anthropic_request_in_chat_terms() -> None:
    body = request(
        system=[
            {"type": "text", "text": "Be "},
            {"type": "text", "text": "brief", "cache_control": {"type": "ephemeral"}},
        ],
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "P"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "21C"},
                    {"type": "text", "text": "And?"},
                ],
            },
        ],
        tools=[{"name": "w", "input_schema": {"type": "object", "properties": {"c": {"type": "string"}}}}],
        tool_choice={"type": "tool", "name": "w", "disable_parallel_tool_use": True},
        stop_sequences=["\n\n"],
        top_k=5,
        temperature=0.5,
    )
    chat = aserving.to_chat(body)
    roles = [m.role for m in chat.messages]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert chat.messages[0].content == "Be brief"
    calls = chat.messages[2].tool_calls or []
    assert calls and json.loads(calls[0].function.arguments) == {"c": "P"}
    assert chat.messages[3].tool_call_id == "t1" and chat.messages[3].content == "21C"
    assert chat.tool_choice.function.name == "w" and chat.parallel_tool_calls is False  # type: ignore[union-attr]
    assert (chat.max_tokens, chat.top_k, chat.temperature, chat.stop) == (8, 5, 0.5, ["\n\n"])


@pytest.mark.parametrize(
    ("choice", "expected"),
    [({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none")],
)
def test_anthropic_tool_choices(choice: dict[str, Any], expected: str) -> None:
    tools = [{"name": "w", "input_schema": {"type": "object"}}]
    assert aserving.to_chat(request(tools=tools, tool_choice=choice)).tool_choice == expected


def test_anthropic_refuses_documents_prefill_and_unknown_fields() -> None:
    raw = {
        "model": "m",
        "max_tokens": 1,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "document", "source": {}}]}
        ],
    }
    with pytest.raises(APIError) as err:
        ap.check_blocks(raw)
    assert err.value.status == 400 and err.value.field == "messages.0.content.1.type"
    assert "'document' are not supported" in err.value.message
    prefill = request(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    with pytest.raises(APIError) as err:
        aserving.to_chat(prefill)
    assert err.value.field == "messages.1"
    with pytest.raises(ValueError, match="thinking"):
        request(thinking={"type": "adaptive"})


def final(reason: FinishReason, stop: str | None = None) -> GenerationEvent:
    event = GenerationEvent("r", [], "", finish_reason=reason)
    event.stop_sequence = stop
    return event


def test_anthropic_stop_reasons() -> None:
    assert aserving.stop_reason(final(FinishReason.EOS), False) == ("end_turn", None)
    assert aserving.stop_reason(final(FinishReason.STOP, "##"), False) == ("stop_sequence", "##")
    assert aserving.stop_reason(final(FinishReason.STOP), False) == ("end_turn", None)  # a grammar completed
    assert aserving.stop_reason(final(FinishReason.LENGTH), False) == ("max_tokens", None)
    assert aserving.stop_reason(final(FinishReason.LENGTH), True) == ("tool_use", None)


def test_tool_use_blocks_need_object_arguments() -> None:
    uses = aserving.tool_uses([ParsedCall("f", '{"a": 1}')])
    assert uses is not None and uses[0]["input"] == {"a": 1} and uses[0]["id"].startswith("toolu_")
    assert aserving.tool_uses([ParsedCall("f", '"text"')]) is None


@pytest.mark.parametrize(
    ("status", "new_status", "kind"),
    [
        (400, 400, "invalid_request_error"),
        (401, 401, "authentication_error"),
        (404, 404, "not_found_error"),
        (413, 413, "request_too_large"),
        (422, 400, "invalid_request_error"),
        (429, 529, "overloaded_error"),
        (503, 529, "overloaded_error"),
        (500, 500, "api_error"),
    ],
)
def test_anthropic_error_shape(status: int, new_status: int, kind: str) -> None:
    body = {"error": {"message": "m", "type": "x", "param": "f", "code": status, "field": "f", "limit": 3}}
    got_status, got = anthropic_error(status, body)
    assert got_status == new_status
    assert got == {"type": "error", "error": {"type": kind, "message": "m", "field": "f", "limit": 3}}
    assert anthropic_error(new_status, got) == (new_status, got)  # a copy's answer passes unchanged


def test_anthropic_paths() -> None:
    assert is_anthropic("/v1/messages") and is_anthropic("/v1/messages/count_tokens")
    assert not is_anthropic("/v1/messagesx") and not is_anthropic("/v1/chat/completions")


# -- Responses -----------------------------------------------------------------------------------------
RESPONSES_TEXT_ORDER = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]
RESPONSES_CALL_ORDER = [
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
]


def test_responses_stream_text_then_call_in_documented_order() -> None:
    ev = ResponseEvents(ResponseShape("resp_1", {"model": "m"}))
    lines = [*ev.start(), *ev.text("Hel"), *ev.text("lo")]
    lines += list(ev.finish([ParsedCall("f", '{"a":1}')], False, {"output_tokens": 2}))
    events = parse_sse(lines)
    assert [n for n, _ in events] == [*RESPONSES_TEXT_ORDER, *RESPONSES_CALL_ORDER, "response.completed"]
    assert [p["sequence_number"] for _, p in events] == list(range(len(events)))
    assert events[0][1]["response"]["status"] == "in_progress"
    assert events[6][1]["text"] == "Hello"
    call_done = events[-2][1]
    assert call_done["output_index"] == 1 and call_done["item"]["arguments"] == '{"a":1}'
    done = events[-1][1]["response"]
    assert done["status"] == "completed"
    assert [i["type"] for i in done["output"]] == ["message", "function_call"]
    assert done["output"][0]["content"][0]["text"] == "Hello"


def test_responses_stream_cut_by_max_output_tokens_is_incomplete() -> None:
    ev = ResponseEvents(ResponseShape("resp_1", {}))
    events = parse_sse([*ev.start(), *ev.text("a"), *ev.finish([], True, {})])
    assert events[-1][0] == "response.incomplete"
    response = events[-1][1]["response"]
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"


def test_responses_empty_answer_is_one_empty_message_and_failures_are_events() -> None:
    ev = ResponseEvents(ResponseShape("resp_1", {}))
    events = parse_sse([*ev.start(), *ev.finish([], False, {})])
    assert [n for n, _ in events][2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    failed = parse_sse([ev.failed("boom")])[0]
    assert failed[0] == "response.failed" and failed[1]["response"]["error"]["message"] == "boom"
    error = parse_sse([ev.error("oops")])[0]
    assert error[0] == "error" and error[1]["message"] == "oops" and "sequence_number" in error[1]


def responses_request(**kw: Any) -> rp.ResponsesRequest:
    return rp.ResponsesRequest.model_validate({"input": "hi", **kw})


def test_responses_input_items_in_chat_terms() -> None:
    body = responses_request(
        instructions="Be brief",
        input=[
            {"role": "user", "content": "Weather?"},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"c":"P"}'},
            {"type": "function_call", "call_id": "c2", "name": "w", "arguments": '{"c":"B"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "21"},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "ok"}]},
        ],
        tool_choice={"type": "function", "name": "w"},
        parallel_tool_calls=False,
        max_output_tokens=9,
    )
    chat = rserving.to_chat(body)
    assert [m.role for m in chat.messages] == ["system", "user", "assistant", "tool", "system"]
    assert [c.id for c in chat.messages[2].tool_calls or []] == ["c1", "c2"]
    assert chat.tool_choice.function.name == "w" and chat.parallel_tool_calls is False  # type: ignore[union-attr]
    assert chat.max_tokens == 9


def test_responses_refuses_store_previous_id_and_files() -> None:
    for field, value in (("store", True), ("previous_response_id", "resp_x")):
        with pytest.raises(APIError) as err:
            rserving.to_chat(responses_request(**{field: value}))
        assert err.value.status == 400 and err.value.field == field
    rserving.to_chat(responses_request(store=False))
    raw = {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "x"}]}]}
    with pytest.raises(APIError) as err:
        rp.check_items(raw)
    assert err.value.field == "input.0.content.0.type" and "files are not supported" in err.value.message
    with pytest.raises(APIError) as err:
        rp.check_items({"input": [{"type": "web_search_call", "id": "ws_1"}]})
    assert err.value.field == "input.0.type"


# -- schemas closed ------------------------------------------------------------------------------------
def test_undeclared_properties_are_closed_unless_the_schema_asks_for_them() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "address": {"type": "object", "properties": {"city": {"type": "string"}}},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {}}}},
            "free": {"type": "object"},
            "open": {"type": "object", "properties": {"a": {}}, "additionalProperties": True},
            "either": {"anyOf": [{"type": "object", "properties": {"x": {}}}, {"type": "null"}]},
            "both": {"allOf": [{"type": "object", "properties": {"p": {}}}]},
        },
        "$defs": {"d": {"type": "object", "properties": {"q": {}}}},
    }
    out = closed(schema)
    props = out["properties"]
    assert out["additionalProperties"] is False
    assert props["address"]["additionalProperties"] is False
    assert props["tags"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in props["free"]  # no properties declared: any object
    assert props["open"]["additionalProperties"] is True
    assert props["either"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in props["both"]["allOf"][0]
    assert out["$defs"]["d"]["additionalProperties"] is False
    assert "additionalProperties" not in schema  # the request's schema is left as it was
    mixed = closed(
        {
            "properties": {"kind": {}},
            "anyOf": [{"properties": {"a": {}}}],
            "if": {"properties": {}},
            "then": {"properties": {"b": {}}},
            "not": {"properties": {"c": {}}},
        }
    )
    assert "additionalProperties" not in mixed  # its parts may add properties
    assert all("additionalProperties" not in mixed[k] for k in ("if", "then", "not"))
    assert "additionalProperties" not in mixed["anyOf"][0]  # beside the parent's own properties


def test_a_stream_cut_by_the_router_ends_in_the_streams_own_format() -> None:
    from llmhost.endpoint.dataplane.routing import stream_cut

    anthropic_cut = parse_sse([b"".join(stream_cut("copy died", False, b"ta", "/v1/messages")).decode()])
    died = {"type": "error", "error": {"type": "api_error", "message": "copy died"}}
    assert anthropic_cut == [("error", died)]
    responses_cut = parse_sse([b"".join(stream_cut("copy died", False, b"\n\n", "/v1/responses")).decode()])
    assert responses_cut == [
        ("error", {"type": "error", "code": "upstream_error", "message": "copy died", "param": None})
    ]
    openai_cut = b"".join(stream_cut("copy died", False, b"\n\n", "/v1/chat/completions"))
    assert openai_cut.startswith(b"data: ") and json.loads(openai_cut[6:])["error"]["message"] == "copy died"
    tgi_cut = b"".join(stream_cut("copy died", False, b"\n\n", "/generate_stream"))
    assert tgi_cut.startswith(b"data:{") and json.loads(tgi_cut[5:])["error"] == "copy died"


async def test_anthropic_routes_answer_every_layers_errors_in_anthropics_shape() -> None:
    """The routes declare Anthropic's format (their route class); the API-key check, the body limit and
    the request-id layer (a crash) refuse in it too, and so do the app's exception handlers."""
    import httpx
    from fastapi import APIRouter, FastAPI
    from starlette.responses import Response, StreamingResponse

    from llmhost.process.lifecycle import Lifecycle
    from llmhost.web import responses
    from llmhost.web.asgi import RequestContextMiddleware
    from llmhost.web.auth import ApiKeyMiddleware, ApiKeys
    from llmhost.web.formats import AnthropicRoute
    from llmhost.web.middleware import BodyLimitMiddleware

    async def fails() -> Response:
        raise RuntimeError("boom")

    async def busy() -> Response:
        raise APIError(429, "queue full", "rate_limit_error", headers={"Retry-After": "1"})

    async def streams() -> Response:
        return StreamingResponse(iter(["event: ping\ndata: {}\n\n"]), media_type="text/event-stream")

    router = APIRouter(route_class=AnthropicRoute)
    router.add_api_route("/v1/messages", fails, methods=["POST"])
    router.add_api_route("/v1/messages/count_tokens", busy, methods=["POST"])
    router.add_api_route("/v1/messages/stream", streams, methods=["POST"])
    app = FastAPI()
    app.include_router(router)
    app.add_api_route("/v1/chat/completions", fails, methods=["POST"])
    responses.install(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=100, routes=app.routes)
    app.add_middleware(ApiKeyMiddleware, keys=ApiKeys.of(["k"]), routes=app.routes)
    app.add_middleware(RequestContextMiddleware, lifecycle=Lifecycle(), routes=app.routes)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        key = {"x-api-key": "k"}
        cases = [
            (await c.post("/v1/messages"), 401, "authentication_error"),
            (await c.post("/v1/messages", content=b"x" * 200, headers=key), 413, "request_too_large"),
            (await c.post("/v1/messages", headers=key), 500, "api_error"),
            (await c.post("/v1/messages/count_tokens", headers=key), 529, "overloaded_error"),
            (await c.get("/v1/messages", headers=key), 405, "invalid_request_error"),
        ]
        for r, status, kind in cases:
            assert r.status_code == status and r.json()["type"] == "error", r.text
            assert r.json()["error"]["type"] == kind and r.json()["error"]["message"]
            assert int(r.headers["content-length"]) == len(r.content)
        assert cases[3][0].headers["retry-after"] == "1"
        other = await c.post("/v1/chat/completions")
        assert other.status_code == 401 and other.json()["error"]["type"] == "authentication_error"
        assert "type" not in other.json()  # OpenAI's shape elsewhere
        streamed = await c.post("/v1/messages/stream", headers=key)
        assert streamed.status_code == 200 and streamed.text == "event: ping\ndata: {}\n\n"
