"""SageMaker Runtime's paths, so that boto3's `sagemaker-runtime` client can call this server: POST
/endpoints/{name}/invocations and /endpoints/{name}/invocations-response-stream (any name), through
the model directory's code/inference.py when it has one, as /invocations; and
/endpoints/{name}/async-invocations, queued in the jobs directory and answered in S3."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.jobs import async_wire
from llmhost.jobs.routes import jobs
from llmhost.server.routes import deps
from llmhost.server.routes.sagemaker import ANSWERS, BODIES, INVOCATIONS, invoke
from llmhost.server.serving.apis.runtime import CustomCall, Runtime
from llmhost.web import eventstream
from llmhost.web import sagemaker_runtime as wire
from llmhost.web.apidoc import COMMON, errors, merge, operation
from llmhost.web.asgi import request_id

router = APIRouter()
# the runtime's own shapes (ValidationError, ModelError carrying the model's refusal, ServiceUnavailable);
# the API-key check, the body limit and a crash answer OpenAI's
ERRORS = merge(errors(400, 424, 503, style="sagemaker"), COMMON, errors(413))


def _runtime(request: Request) -> Runtime:
    custom = deps.custom(request)
    call: CustomCall | None = None
    if custom is not None:

        async def call(req: Request, stream: bool, accept: str | None) -> Response:
            return await custom.invoke(req, invoke, accept=accept, stream=stream)

    return Runtime(deps.context(request).settings.model_name, deps.json_body, invoke, call)


# a body that asks to stream (`stream: true`) is answered with the container's server-sent events, as
# SageMaker's InvokeEndpoint passes on what the container's /invocations answers
@router.post(
    wire.INVOKE_PATH,
    openapi_extra=operation(
        "SageMaker Runtime InvokeEndpoint",
        body=BODIES,
        success=ANSWERS,
        stream=True,
        errors=ERRORS,
        description=(
            INVOCATIONS + " Content-Type must be application/json; a body with `stream: true` is "
            "answered as server-sent events (text/event-stream)."
        ),
    ),
)
async def invoke_endpoint(name: str, request: Request) -> Response:
    return await _runtime(request).invoke(request, name, stream=False)


@router.post(
    wire.STREAM_PATH,
    openapi_extra=operation(
        "SageMaker Runtime InvokeEndpointWithResponseStream",
        body=BODIES,
        errors=ERRORS,
        media={eventstream.MEDIA_TYPE: "PayloadPart events carrying the SSE bytes"},
        description=INVOCATIONS + " Content-Type must be application/json.",
    ),
)
async def invoke_endpoint_with_response_stream(name: str, request: Request) -> Response:
    return await _runtime(request).invoke(request, name, stream=True)


@router.post(
    async_wire.ASYNC_PATH,
    status_code=202,
    openapi_extra=operation(
        "SageMaker Runtime InvokeEndpointAsync",
        body=BODIES,
        success=async_wire.AsyncAccepted,
        status=202,
        errors=merge(errors(400, style="sagemaker"), COMMON, errors(413)),
        description=(
            f"Queues the input at {async_wire.INPUT_LOCATION} (an s3:// object; or the call's Body, up "
            f"to {async_wire.MAX_INLINE_BODY} bytes) in the jobs directory (--jobs-dir) and answers "
            "202 at once with its InferenceId, OutputLocation (<--async-output>/<InferenceId>.out) and "
            "FailureLocation (<--async-failure>/<InferenceId>-error.out). The input then runs as "
            "/invocations runs it, behind interactive requests; a 2xx answer's body is written to "
            "the OutputLocation, any other answer's body (or why it could not run: RequestTTLSeconds "
            "passed in the queue, InvocationTimeoutSeconds passed running, the input unreadable) to "
            "the FailureLocation. A server without --async-output answers 400."
        ),
    ),
)
async def invoke_endpoint_async(name: str, request: Request) -> Response:
    rid = request_id(request.scope)
    try:
        ask = async_wire.parse(request.headers, await request.body())
        queued = jobs(request).invocations.submit(ask)
    except async_wire.AskError as exc:
        return wire.validation_error(str(exc), rid)
    headers = {
        async_wire.OUTPUT_LOCATION: queued.output_location,
        async_wire.FAILURE_LOCATION: queued.failure_location,
        wire.REQUEST_ID: rid,
    }
    accepted = async_wire.AsyncAccepted(InferenceId=queued.ask.inference_id)
    return JSONResponse(accepted.model_dump(), status_code=202, headers=headers)
