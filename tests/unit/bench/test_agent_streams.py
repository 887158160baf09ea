"""The load generator reads the Messages and Responses streams llmhost writes: tokens counted per text
event, the server's usage preferred, the end marker required, error events failures."""

from __future__ import annotations

import pytest

from llmhost.bench.load.sse import SSEDecoder
from llmhost.bench.load.targets import StreamError, Target
from llmhost.server.serving.apis.anthropic_events import MessageEvents, error_event
from llmhost.server.serving.apis.responses_events import ResponseEvents, ResponseShape, usage


def payloads(lines: list[str]) -> list[bytes]:
    decoder = SSEDecoder()
    return [*decoder.feed("".join(lines).encode()), *decoder.finish()]


def test_messages_stream() -> None:
    ev = MessageEvents("msg_1", "m", 9)
    lines = [ev.start(), *ev.text("a"), *ev.text("b"), *ev.finish([], "max_tokens", None, 3)]
    s = Target("messages").new_stream()
    counted = [s.feed(p) for p in payloads(lines)]
    assert sum(counted) == 2 and s.finished and s.output_tokens == 3 and s.reported_prompt_tokens == 9
    s.check_complete()
    cut = Target("messages").new_stream()
    for p in payloads([ev.start(), *ev.text("a")]):
        cut.feed(p)
    with pytest.raises(StreamError):
        cut.check_complete()
    with pytest.raises(StreamError) as err:
        Target("messages").new_stream().feed(payloads([error_event("boom")])[0])
    assert err.value.kind == "stream_error" and "boom" in err.value.detail


def test_responses_stream() -> None:
    ev = ResponseEvents(ResponseShape("resp_1", {}))
    lines = [*ev.start(), *ev.text("a"), *ev.text("b"), *ev.finish([], True, usage(7, 4, 0))]
    s = Target("responses").new_stream()
    assert sum(s.feed(p) for p in payloads(lines)) == 2
    assert s.finished and s.output_tokens == 4 and s.reported_prompt_tokens == 7
    for failure in (ev.failed("boom"), ev.error("boom")):
        with pytest.raises(StreamError) as err:
            Target("responses").new_stream().feed(payloads([failure])[0])
        assert err.value.kind == "stream_error" and "boom" in err.value.detail


def test_agent_bodies() -> None:
    messages = Target("messages", model="m", temperature=0.0)
    assert messages.path == "/v1/messages"
    assert messages.body("hi", 8) == {
        "model": "m",
        "stream": True,
        "max_tokens": 8,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": "hi"}],
    }
    responses = Target("responses")
    assert responses.path == "/v1/responses"
    body = responses.body("hi", 8)
    assert body == {"model": "default", "stream": True, "input": "hi", "max_output_tokens": 8}
