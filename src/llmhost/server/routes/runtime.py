"""SageMaker Runtime's paths, so that boto3's `sagemaker-runtime` client can call this server: POST
/endpoints/{name}/invocations and /endpoints/{name}/invocations-response-stream (any name), through
the model directory's code/inference.py when it has one, as /invocations (the async invocations'
route is the jobs', `llmhost.jobs.async_routes`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.routes import deps
from llmhost.server.routes.sagemaker import ANSWERS, BODIES, INVOCATIONS, invoke
from llmhost.server.serving.apis.runtime import CustomCall, Runtime
from llmhost.web import eventstream
from llmhost.web import sagemaker_runtime as wire
from llmhost.web.apidoc import COMMON, errors, merge, operation

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
