"""SageMaker Runtime's InvokeEndpointAsync on the wire, as boto3's `sagemaker-runtime` client sends it
(botocore's service model): the request's headers read and checked against the service's bounds, and
where the answer and the error of an invocation are written (SageMaker's naming)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from llmhost.errors import BadRequestError
from llmhost.store.s3uri import S3Ref, parse_s3_ref

ASYNC_PATH = "/endpoints/{name}/async-invocations"
INPUT_LOCATION = "X-Amzn-SageMaker-InputLocation"
CONTENT_TYPE = "X-Amzn-SageMaker-Content-Type"
ACCEPT = "X-Amzn-SageMaker-Accept"
INFERENCE_ID = "X-Amzn-SageMaker-Inference-Id"
REQUEST_TTL = "X-Amzn-SageMaker-RequestTTLSeconds"
INVOCATION_TIMEOUT = "X-Amzn-SageMaker-InvocationTimeoutSeconds"
CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
# where the answer goes, chosen by the caller: not taken here (the server's prefixes decide)
UNSUPPORTED = ("X-Amzn-SageMaker-Filename", "X-Amzn-SageMaker-S3OutputPathExtension")
OUTPUT_LOCATION = "X-Amzn-SageMaker-OutputLocation"
FAILURE_LOCATION = "X-Amzn-SageMaker-FailureLocation"
# the service model's bounds, and SageMaker's defaults (6 hours in the queue, 15 minutes to answer)
TTL_RANGE = (60, 21_600)
DEFAULT_TTL_S = 21_600
TIMEOUT_RANGE = (1, 3_600)
DEFAULT_TIMEOUT_S = 900
MAX_INFERENCE_ID = 64
MAX_INLINE_BODY = 128_000  # Body (the input in the call instead of at InputLocation)


class AskError(BadRequestError):
    """The call cannot be queued: the message names the header and its bound."""


class AsyncAccepted(BaseModel):
    """InvokeEndpointAsync's answer (202): the id; OutputLocation and FailureLocation are headers."""

    InferenceId: str


@dataclass(frozen=True, slots=True)
class AsyncAsk:
    """One InvokeEndpointAsync call: its input (at `input_location`, else `body`) and how to run it."""

    inference_id: str
    input_location: str  # "" when the input came as the call's Body
    body: bytes | None
    content_type: str | None
    accept: str | None
    custom_attributes: str | None
    ttl_s: int
    timeout_s: int


def parse(headers: Mapping[str, str], body: bytes) -> AsyncAsk:
    """The call its headers (and Body) make, or AskError naming the header at fault."""
    for name in UNSUPPORTED:
        if headers.get(name) is not None:
            raise AskError(
                f"{name} is not supported here: answers are written under the server's --async-output "
                "as <InferenceId>.out"
            )
    location = headers.get(INPUT_LOCATION)
    return AsyncAsk(
        inference_id=_inference_id(headers.get(INFERENCE_ID)),
        input_location=_input_location(location, body),
        body=None if location else body,
        content_type=headers.get(CONTENT_TYPE),
        accept=headers.get(ACCEPT),
        custom_attributes=headers.get(CUSTOM_ATTRIBUTES),
        ttl_s=_seconds(headers.get(REQUEST_TTL), REQUEST_TTL, TTL_RANGE, DEFAULT_TTL_S),
        timeout_s=_seconds(
            headers.get(INVOCATION_TIMEOUT), INVOCATION_TIMEOUT, TIMEOUT_RANGE, DEFAULT_TIMEOUT_S
        ),
    )


def _input_location(value: str | None, body: bytes) -> str:
    if value is not None and body:
        raise AskError(f"{INPUT_LOCATION} and a Body are mutually exclusive: give one of them")
    if value is None:
        if not body:
            raise AskError(f"missing {INPUT_LOCATION}: the s3:// URI of the input (InputLocation)")
        if len(body) > MAX_INLINE_BODY:
            raise AskError(
                f"Body is {len(body)} bytes, over the {MAX_INLINE_BODY} bytes an inline input may have: "
                f"upload it to S3 and give {INPUT_LOCATION}"
            )
        return ""
    if not _names_object(value):
        raise AskError(f"{INPUT_LOCATION} must be the s3://bucket/key URI of an object, got {value!r}")
    return value


def _names_object(uri: str) -> bool:
    try:
        return not parse_s3_ref(uri).is_prefix
    except ValueError:  # not s3://, or no bucket
        return False


def _inference_id(value: str | None) -> str:
    if value is None:
        return str(uuid.uuid4())
    if not 1 <= len(value) <= MAX_INFERENCE_ID or not value.isprintable() or value[0].isspace():
        raise AskError(
            f"{INFERENCE_ID} must be 1 to {MAX_INFERENCE_ID} printable characters, not starting with a "
            f"space, got {value!r}"
        )
    return value


def _seconds(value: str | None, header: str, bounds: tuple[int, int], default: int) -> int:
    if value is None:
        return default
    low, high = bounds
    if not value.strip().isdigit() or not low <= int(value) <= high:
        raise AskError(f"{header} must be a whole number of seconds from {low} to {high}, got {value!r}")
    return int(value)


def output_location(prefix: S3Ref, inference_id: str) -> str:
    """Where an invocation's answer is written: SageMaker's `<prefix>/<InferenceId>.out`."""
    return S3Ref(prefix.bucket, f"{prefix.key}{inference_id}.out").uri


def failure_location(prefix: S3Ref, inference_id: str) -> str:
    """Where its error is written instead: `<prefix>/<InferenceId>-error.out`."""
    return S3Ref(prefix.bucket, f"{prefix.key}{inference_id}-error.out").uri
