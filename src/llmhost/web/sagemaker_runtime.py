"""The SageMaker Runtime API on the wire (InvokeEndpoint, InvokeEndpointWithResponseStream), as boto3's
`sagemaker-runtime` client reads it: header names, content negotiation, and errors in the rest-json
shape botocore maps to its exception classes (`x-amzn-ErrorType` names the class; the body's members
fill the exception's response). Imports nothing of the server: the endpoint's router answers with it.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from llmhost.web.errors import RETRY_AFTER_S

INVOKE_PATH = "/endpoints/{name}/invocations"
STREAM_PATH = "/endpoints/{name}/invocations-response-stream"
COMPONENT = "X-Amzn-SageMaker-Inference-Component"
# InvokeEndpointWithResponseStream moves the model's media types out of Accept and Content-Type
STREAM_ACCEPT = "X-Amzn-SageMaker-Accept"
STREAM_CONTENT_TYPE = "X-Amzn-SageMaker-Content-Type"
INVOKED_VARIANT = "x-Amzn-Invoked-Production-Variant"
VARIANT = "AllTraffic"  # the name SageMaker gives a single-variant endpoint's variant
REQUEST_ID = "x-amzn-RequestId"  # botocore reports it as ResponseMetadata.RequestId
ERROR_TYPE = "x-amzn-ErrorType"
JSON = "application/json"
SSE = "text/event-stream"
MAX_MESSAGE = 2048  # the service model's bound on Message


def media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def content_type_problem(value: str | None) -> str | None:
    """Why the body's Content-Type cannot be read (only JSON can), or None. An absent one is read as
    JSON: boto3 sends none when ContentType is not given."""
    if value is None or media_type(value) == JSON:
        return None
    return f"ContentType {value!r} is not supported: the body must be JSON (ContentType {JSON!r})"


def _quality(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def accepts(accept: str | None, produced: str) -> bool:
    """Whether an Accept header admits the media type `produced` (absent: anything goes)."""
    if not accept or not accept.strip():
        return True
    main = produced.split("/", 1)[0]
    for item in accept.split(","):
        kind, *params = item.split(";")
        if media_type(kind) in ("*/*", f"{main}/*", produced) and _quality(params) > 0:
            return True
    return False


def accept_problem(accept: str | None, produced: str) -> str | None:
    if accepts(accept, produced):
        return None
    return f"Accept {accept!r} cannot be produced: this call answers {produced!r} (or use '*/*')"


def error(
    status: int,
    type_: str,
    message: str,
    request_id: str = "",
    headers: dict[str, str] | None = None,
    **members: Any,
) -> JSONResponse:
    message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
    # `message` is what botocore's generic parser reads, `Message` the modeled member
    body: dict[str, Any] = {"__type": type_, "message": message, "Message": message, **members}
    head = {ERROR_TYPE: type_, **(headers or {})}
    if request_id:
        head[REQUEST_ID] = request_id
    return JSONResponse(body, status_code=status, headers=head)


def validation_error(message: str, request_id: str = "") -> JSONResponse:
    return error(400, "ValidationError", message, request_id)


def service_unavailable(message: str, request_id: str = "", retry_after: str | None = None) -> JSONResponse:
    return error(
        503,
        "ServiceUnavailable",
        message,
        request_id,
        headers={"Retry-After": retry_after or str(RETRY_AFTER_S)},
    )


def model_error(status: int, original: str, log_stream: str, request_id: str = "") -> JSONResponse:
    """The model answered `status` with the body `original`: SageMaker's 424 carrying both."""
    kind = "client" if status < 500 else "server"
    message = f'Received {kind} error ({status}) from model with message "{original}". See {log_stream}.'
    return error(
        424,
        "ModelError",
        message,
        request_id,
        OriginalStatusCode=status,
        OriginalMessage=original,
        LogStreamArn=log_stream,
    )


def log_stream(endpoint: str, model: str, request_id: str) -> str:
    """Where a failed invocation is logged: the LogStreamArn of a ModelError (the server logs every
    request under its id)."""
    return f"llmhost/endpoints/{endpoint}/{model}/requests/{request_id}"
