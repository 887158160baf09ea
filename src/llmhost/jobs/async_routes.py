"""SageMaker Runtime's InvokeEndpointAsync (POST /endpoints/{name}/async-invocations), served by
`llmhost serve`, the endpoint router and the Ray ingress alike (each app keeps its Jobs at
`app.state.jobs`): queued in the jobs directory, run through the app's own /invocations, answered in S3."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.jobs import async_wire
from llmhost.jobs.routes import jobs
from llmhost.server.routes.sagemaker import BODIES
from llmhost.web import sagemaker_runtime as wire
from llmhost.web.apidoc import COMMON, errors, merge, operation
from llmhost.web.asgi import request_id

router = APIRouter()


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
