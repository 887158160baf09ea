"""SSE decoding and each API's stream parsing."""

from __future__ import annotations

import json

import pytest

from llmhost.bench.load.sse import SSEDecoder
from llmhost.bench.load.targets import COMPONENT_HEADER, StreamError, Target


def test_sse_split_across_chunks_and_crlf() -> None:
    d = SSEDecoder()
    stream = (
        b'data: {"a":1}\r\n\r\ndata:{"b":2}\n\n: comment\n\n'
        b"event: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n"
    )
    out: list[bytes] = []
    for i in range(len(stream)):  # one byte at a time: the worst split
        out += d.feed(stream[i : i + 1])
    out += d.finish()
    assert out == [b'{"a":1}', b'{"b":2}', b"line1\nline2", b"[DONE]"]


def test_sse_unterminated_last_event() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: 1\n\ndata: 2") == [b"1"]
    assert d.finish() == [b"2"]


def _ev(obj: object) -> bytes:
    return json.dumps(obj).encode()


def test_openai_stream_counts_text_and_prefers_usage() -> None:
    s = Target("openai").new_stream()
    assert s.feed(_ev({"choices": [{"text": "a"}]})) == 1
    assert s.feed(_ev({"choices": [{"text": ""}]})) == 0
    assert s.feed(_ev({"choices": [{"text": "b", "finish_reason": "length"}]})) == 1
    assert s.output_tokens == 2 and s.counted_by == "events"
    s.feed(_ev({"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 7}}))
    assert s.output_tokens == 3 and s.reported_prompt_tokens == 7 and s.counted_by == "server"
    with pytest.raises(StreamError):
        s.check_complete()
    s.feed(b"[DONE]")
    s.check_complete()


def test_chat_stream_ignores_role_chunk() -> None:
    s = Target("chat").new_stream()
    assert s.feed(_ev({"choices": [{"delta": {"role": "assistant"}}]})) == 0
    assert s.feed(_ev({"choices": [{"delta": {"content": "hi"}}]})) == 1


def test_tgi_stream_details() -> None:
    s = Target("tgi").new_stream()
    tok = {"id": 1, "text": "x", "logprob": 0.0, "special": False}
    assert s.feed(_ev({"token": tok, "generated_text": None, "details": None})) == 1
    s.feed(_ev({"token": tok, "generated_text": "xx", "details": {"generated_tokens": 5}}))
    assert s.finished and s.output_tokens == 5


@pytest.mark.parametrize("api", ["openai", "tgi"])
def test_errors_in_streams(api: str) -> None:
    with pytest.raises(StreamError) as e:
        Target(api).new_stream().feed(b"{not json")
    assert e.value.kind == "malformed_stream"
    with pytest.raises(StreamError) as e:
        Target(api).new_stream().feed(_ev({"error": "boom"}))
    assert e.value.kind == "stream_error"


def test_bodies() -> None:
    body = Target("openai", model="m").body("hello", 16)
    assert body["prompt"] == "hello" and body["max_tokens"] == 16 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    chat = Target("chat").body("hello", 4)
    assert chat["messages"] == [{"role": "user", "content": "hello"}] and chat["model"] == "default"
    tgi = Target("tgi").body("hello", 8)
    assert tgi == {"inputs": "hello", "parameters": {"max_new_tokens": 8, "details": True}}
    sm = Target("sagemaker", component="ic-1")
    assert sm.body("hello", 8)["stream"] is True and sm.path == "/invocations"
    assert sm.headers()[COMPONENT_HEADER] == "ic-1"
    assert COMPONENT_HEADER not in Target("tgi", component="ic-1").headers()
    with pytest.raises(ValueError):
        Target("grpc")


def test_temperature_is_sent_only_when_set() -> None:
    assert "temperature" not in Target("openai").body("hi", 4)
    assert Target("openai", temperature=0.0).body("hi", 4)["temperature"] == 0.0
    assert "temperature" not in Target("tgi", temperature=0.0).body("hi", 4)["parameters"]
    params = Target("tgi", temperature=0.7).body("hi", 4)["parameters"]
    assert params["temperature"] == 0.7 and params["do_sample"] is True


def test_each_api_tells_the_thought_from_the_answer() -> None:
    """A thinking model's stream: thought events count as generated tokens, `answered` turns true with
    the first answer event, and the server's reasoning_tokens report wins over the count."""
    streams = {
        "chat": (
            [{"choices": [{"delta": {"reasoning_content": "I"}}]}],
            [{"choices": [{"delta": {"content": "Hi"}}]}],
            {
                "choices": [],
                "usage": {"completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 3}},
            },
        ),
        "messages": (
            [
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "I"},
                }
            ],
            [{"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}],
            None,
        ),
        "responses": (
            [{"type": "response.reasoning_text.delta", "delta": "I"}],
            [{"type": "response.output_text.delta", "delta": "Hi"}],
            {
                "type": "response.completed",
                "response": {"usage": {"output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 3}}},
            },
        ),
    }
    for api, (thought, answer, end) in streams.items():
        s = Target(api).new_stream()
        assert [s.feed(_ev(e)) for e in thought] == [1] and not s.answered, api
        assert [s.feed(_ev(e)) for e in answer] == [1] and s.answered, api
        assert s.reasoning_tokens == 1 and s.counted_tokens == 2, api
        if end is not None:
            s.feed(_ev(end))
            assert s.reasoning_tokens == 3 and s.output_tokens == 5, api
