"""SageMaker Runtime (InvokeEndpoint, InvokeEndpointWithResponseStream) over what /invocations answers.

The runtime's headers are checked, the body runs as /invocations runs it (through the model directory's
code/inference.py when there is one, as SageMaker sends InvokeEndpoint to the container's /invocations:
its input_fn then decides which content types it reads), and the answer takes the
runtime's shapes: the model's refusals and failures become ModelError (424, carrying the original
status and body), overload and loading ServiceUnavailable (503); a stream is sent as event-stream
PayloadParts (the SSE bytes as they come) and a generation failing mid-way as a ModelStreamError.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from pydantic import StrictBool, TypeAdapter, ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import AsyncContentStream, Response, StreamingResponse

from llmhost.engine.request import EngineError
from llmhost.server.errors import from_engine
from llmhost.shared.jsontypes import JSONObject
from llmhost.web import eventstream
from llmhost.web import sagemaker_runtime as wire
from llmhost.web.asgi import request_id
from llmhost.web.errors import APIError, from_pydantic

Reader = Callable[[Request], Awaitable[JSONObject]]  # the client's body
Dispatch = Callable[[Request, JSONObject], Awaitable[Response]]
# inference.py's answer: (request, the response-stream call?, the Accept the runtime carried)
CustomCall = Callable[[Request, bool, "str | None"], Awaitable[Response]]
# the bodies that can stream (TGI `inputs`, OpenAI `messages` and `prompt`); others answer one JSON
STREAMING_KEYS = ("inputs", "messages", "prompt")
_FLAG = TypeAdapter(StrictBool)


def streaming_body(body: JSONObject, stream: bool) -> JSONObject:
    """For InvokeEndpointWithResponseStream (`stream`): a body that can stream asks to. A `stream` that is
    no boolean stays as sent, for the request model to refuse (a 422, the runtime's ModelError)."""
    if "stream" in body and not isinstance(body["stream"], bool):
        return body
    return {**body, "stream": True} if stream and any(key in body for key in STREAMING_KEYS) else body


def streams(body: JSONObject) -> bool:
    """Whether the body asks for SSE, read as the request models read `stream` (they refuse an
    invalid one)."""
    try:
        return _FLAG.validate_python(body.get("stream", False))
    except ValidationError:
        return False


def api_error(exc: APIError | ValidationError | EngineError) -> APIError:
    """The error /invocations would have answered for `exc`."""
    if isinstance(exc, ValidationError):
        return from_pydantic(exc)
    if isinstance(exc, EngineError):
        return from_engine(exc)
    return exc


class _Refused(Exception):
    """The call cannot be answered as asked (a ValidationError of the runtime, not the model's)."""


@dataclass(frozen=True, slots=True)
class Runtime:
    model: str  # the served model: the only inference component a single server has
    read: Reader  # the body as /invocations reads it
    dispatch: Dispatch  # what /invocations answers for a body
    # inference.py's /invocations, when the model directory has one: SageMaker's InvokeEndpoint reaches
    # the container's /invocations, so the script answers these calls too
    custom: CustomCall | None = None

    async def invoke(self, request: Request, endpoint: str, stream: bool) -> Response:
        rid = request_id(request.scope)
        problem = self.header_problem(request.headers)
        if problem is None and not await request.body():
            # the runtime's own check, as AWS's (Body is a required member): the caller's mistake, not
            # the model's, so a ValidationError rather than the container's refusal as a ModelError
            problem = (
                "1 validation error detected: Value at 'body' failed to satisfy constraint: "
                "Member must not be null"
            )
        if problem is not None:
            return wire.validation_error(problem, rid)
        try:
            response = await self._answer(request, stream)
        except _Refused as exc:
            return wire.validation_error(str(exc), rid)
        except (APIError, ValidationError, EngineError) as exc:
            err = api_error(exc)
            return self.failure(
                err.status,
                json.dumps(err.body(rid)),
                err.message,
                endpoint,
                rid,
                err.headers.get("Retry-After"),
            )
        # a stream's status is 200 whatever happens later; its errors travel in the stream
        if response.status_code >= 400 and not isinstance(response, StreamingResponse):
            original = bytes(response.body).decode(errors="replace")
            return self.failure(
                response.status_code, original, original, endpoint, rid, response.headers.get("retry-after")
            )
        response.headers[wire.INVOKED_VARIANT] = wire.VARIANT
        response.headers[wire.REQUEST_ID] = rid
        return framed(response) if stream else response

    async def _answer(self, request: Request, stream: bool) -> Response:
        accept = request.headers.get(wire.STREAM_ACCEPT if stream else "accept")
        if self.custom is not None:  # the script reads the body and content type and answers `accept`
            return await self.custom(request, stream, accept)
        body = streaming_body(await self.read(request), stream)
        problem = wire.accept_problem(accept, wire.SSE if streams(body) else wire.JSON)
        if problem is not None:
            raise _Refused(problem)
        return await self.dispatch(request, body)

    def header_problem(self, headers: Headers) -> str | None:
        # with inference.py, its input_fn decides which content types it reads (SageMaker does not check)
        problem = None if self.custom is not None else wire.content_type_problem(headers.get("content-type"))
        component = headers.get(wire.COMPONENT)
        if problem is None and component and component != self.model:
            problem = (
                f"InferenceComponentName {component!r} is not served here: the only inference "
                f"component is {self.model!r} (header {wire.COMPONENT})"
            )
        return problem

    def failure(
        self, status: int, original: str, message: str, endpoint: str, rid: str, retry_after: str | None
    ) -> Response:
        """The model refused or failed with `status` and the body `original`."""
        if status in (429, 503):  # full queue, loading, draining: retrying later helps
            return wire.service_unavailable(message, rid, retry_after)
        return wire.model_error(status, original, wire.log_stream(endpoint, self.model, rid), rid)


def framed(response: Response) -> Response:
    """The answer as an event stream of PayloadParts. A streaming answer keeps its own sending (it
    aborts the generation however the client leaves); only its chunks and media type change."""
    inner = response.headers.get("content-type", wire.SSE)
    if isinstance(response, StreamingResponse):
        response.body_iterator = _parts(response.body_iterator)
        response.headers["content-type"] = eventstream.MEDIA_TYPE
        response.headers[wire.STREAM_CONTENT_TYPE] = inner
        return response
    headers = {k: v for k, v in response.headers.items() if k not in ("content-type", "content-length")}
    headers[wire.STREAM_CONTENT_TYPE] = inner
    return Response(
        eventstream.payload_part(bytes(response.body)),
        status_code=response.status_code,
        headers=headers,
        media_type=eventstream.MEDIA_TYPE,
    )


async def _parts(chunks: AsyncContentStream) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        if not data:
            continue
        failure = sse_error(data)
        if failure is not None:
            yield eventstream.model_stream_error(*failure)
            return
        yield eventstream.payload_part(data)


def sse_error(event: bytes) -> tuple[str, str] | None:
    """The message and ModelStreamError code of an SSE error event of the TGI or OpenAI stream
    (`data: {"error": ...}`), or None for any other event."""
    if b'"error"' not in event:  # most events: skip parsing
        return None
    text = event.decode(errors="replace").strip()
    if not text.startswith("data:"):
        return None
    try:
        payload = json.loads(text[len("data:") :])
    except ValueError:
        return None
    if not isinstance(payload, dict) or "error" not in payload:
        return None
    error = payload["error"]
    if isinstance(error, dict):  # OpenAI's {"message", "type", "code"}
        timeout = error.get("type") == "timeout"
        return str(error.get("message", "")), eventstream.TIMEOUT if timeout else eventstream.STREAM_BROKEN
    return str(error), eventstream.STREAM_BROKEN  # TGI's {"error": message, "error_type": ...}
