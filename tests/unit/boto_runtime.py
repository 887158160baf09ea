"""What boto3's `sagemaker-runtime` client makes of a response, without a socket: botocore's own
service model and rest-json parser, used as its endpoint uses them (modeled error fields included)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import botocore.session
from botocore.awsrequest import HeadersDict
from botocore.parsers import create_parser

SERVICE = botocore.session.get_session().get_service_model("sagemaker-runtime")
INVOKE = "InvokeEndpoint"
STREAM = "InvokeEndpointWithResponseStream"


class RawStream:
    """The raw body botocore's EventStream reads, delivered in chunks of `size` bytes."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    def stream(self) -> Iterator[bytes]:
        for i in range(0, len(self.data), self.size):
            yield self.data[i : i + self.size]

    def close(self) -> None:
        pass


def parse(
    status: int, headers: Mapping[str, str], body: bytes, operation: str = INVOKE, chunk: int = 7
) -> dict[str, Any]:
    op = SERVICE.operation_model(operation)
    parser = create_parser(SERVICE.metadata["protocol"])
    streamed = status < 300 and op.has_event_stream_output
    response = {
        "status_code": status,
        "headers": HeadersDict(headers),
        "body": RawStream(body, chunk) if streamed else body,
        "context": {"operation_name": op.name},
    }
    parsed: dict[str, Any] = parser.parse(response, op.output_shape)
    code = parsed.get("Error", {}).get("Code")
    shape = SERVICE.shape_for_error_code(code) if code else None
    if shape is not None:
        parsed.update(parser.parse(response, shape))
    return parsed


def events(data: bytes, chunk: int = 7) -> Iterator[dict[str, Any]]:
    """The events boto3 yields while iterating `response["Body"]` of a stream with these bytes."""
    parsed = parse(200, {"content-type": "application/vnd.amazon.eventstream"}, data, STREAM, chunk)
    yield from parsed["Body"]
