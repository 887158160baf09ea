"""The event-stream encoder, checked by botocore's own decoder and by the parser boto3 iterates with."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import EventStreamError

from llmhost.web import eventstream
from tests.unit.boto_runtime import events


def decode(data: bytes, chunk: int) -> list[tuple[dict[str, object], bytes]]:
    buffer = EventStreamBuffer()
    out = []
    for i in range(0, len(data), chunk):
        buffer.add_data(data[i : i + chunk])
        out += [(m.headers, m.payload) for m in buffer]
    return out


@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_messages_decode_whatever_the_chunking(chunk: int) -> None:
    parts = [b'data:{"token": {"text": "h\xc3\xa9"}}\n\n', b"", b"x" * 70_000]
    data = b"".join(eventstream.payload_part(p) for p in parts)
    decoded = decode(data, chunk)
    assert [payload for _, payload in decoded] == parts
    assert decoded[0][0] == {
        ":event-type": "PayloadPart",
        ":content-type": "application/octet-stream",
        ":message-type": "event",
    }


def test_any_string_headers_round_trip() -> None:
    headers = {"a": "", ":weird-été": "v" * 1000}
    [(got, payload)] = decode(eventstream.encode(headers, b"\x00\xff"), 3)
    assert got == headers and payload == b"\x00\xff"
    with pytest.raises(ValueError, match="too long"):
        eventstream.encode({"h": "v" * 70_000}, b"")


def test_boto3_yields_payload_parts_then_raises_the_model_stream_error() -> None:
    data = eventstream.payload_part(b"one ") + eventstream.payload_part(b"two")
    assert [e["PayloadPart"]["Bytes"] for e in events(data)] == [b"one ", b"two"]
    data += eventstream.model_stream_error("generation failed: boom", eventstream.TIMEOUT)
    seen = []
    with pytest.raises(EventStreamError) as caught:
        for event in events(data, chunk=11):
            seen.append(event["PayloadPart"]["Bytes"])
    assert seen == [b"one ", b"two"]
    error = caught.value.response["Error"]
    assert error == {"Code": "ModelStreamError", "Message": "generation failed: boom"}
    [(headers, payload)] = decode(eventstream.model_stream_error("m"), 64)
    assert headers[":message-type"] == "exception" and headers[":exception-type"] == "ModelStreamError"
    assert json.loads(payload) == {"Message": "m", "ErrorCode": eventstream.STREAM_BROKEN}


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def test_whole_messages_recuts_at_boundaries() -> None:
    messages = [eventstream.payload_part(b"a" * n) for n in (0, 1, 300)]
    data = b"".join(messages)
    for size in (1, 17, len(data)):
        assert [m async for m in eventstream.whole_messages(chunks_of(data, size))] == messages


async def test_whole_messages_refuses_a_truncated_or_impossible_stream() -> None:
    data = eventstream.payload_part(b"first") + eventstream.payload_part(b"second")[:-3]
    got = []
    with pytest.raises(eventstream.MalformedStream, match="ended"):
        async for message in eventstream.whole_messages(chunks_of(data, 4)):
            got.append(message)
    assert got == [eventstream.payload_part(b"first")]
    with pytest.raises(eventstream.MalformedStream, match="cannot be 3 bytes"):
        async for _ in eventstream.whole_messages(chunks_of(b"\x00\x00\x00\x03" + b"\x00" * 12, 16)):
            pass
