"""AWS event-stream framing (`application/vnd.amazon.eventstream`), the binary format of SageMaker's
InvokeEndpointWithResponseStream: each message is

    [total length u32][headers length u32][prelude CRC32] [headers] [payload] [message CRC32]

with big-endian integers and every header a string (name length u8, name, type 7, value length u16,
value). Imports nothing of the server: the endpoint's router frames its own errors with it.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping

from llmhost.errors import LlmhostError

MEDIA_TYPE = "application/vnd.amazon.eventstream"
PRELUDE_BYTES = 12
CRC_BYTES = 4
_STRING = 7
# ModelStreamError's codes as the service documents them
TIMEOUT = "ModelInvocationTimeExceeded"
STREAM_BROKEN = "StreamBroken"


class MalformedStream(LlmhostError, ValueError):
    """The bytes are not a sequence of whole event-stream messages."""


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    if len(raw_name) > 0xFF or len(raw_value) > 0xFFFF:
        raise ValueError(f"event-stream header {name!r} is too long")
    typed_value = struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    return struct.pack(">B", len(raw_name)) + raw_name + typed_value


def encode(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One message: string headers in the given order, then the payload."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = PRELUDE_BYTES + len(head) + len(payload) + CRC_BYTES
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", _crc(prelude))
    message = prelude + head + payload
    return message + struct.pack(">I", _crc(message))


def payload_part(data: bytes) -> bytes:
    """A PayloadPart event: `data` is the part's raw bytes."""
    headers = {
        ":event-type": "PayloadPart",
        ":content-type": "application/octet-stream",
        ":message-type": "event",
    }
    return encode(headers, data)


def model_stream_error(message: str, code: str = STREAM_BROKEN) -> bytes:
    """A ModelStreamError exception event; boto3 raises it (EventStreamError) while iterating."""
    headers = {
        ":exception-type": "ModelStreamError",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode(headers, json.dumps({"Message": message, "ErrorCode": code}).encode())


async def whole_messages(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Re-cuts a byte stream at message boundaries, so that whatever is appended after the last one
    (an error event when the source fails) still decodes. Bytes that cannot be a message, or an end
    inside one, raise MalformedStream."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        start = 0
        while len(buffer) - start >= PRELUDE_BYTES:
            (total,) = struct.unpack_from(">I", buffer, start)
            if total < PRELUDE_BYTES + CRC_BYTES:
                raise MalformedStream(f"an event-stream message cannot be {total} bytes long")
            if len(buffer) - start < total:
                break
            yield buffer[start : start + total]
            start += total
        buffer = buffer[start:]
    if buffer:
        raise MalformedStream(f"the stream ended {len(buffer)} bytes into a message")
