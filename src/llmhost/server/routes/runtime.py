"""SageMaker Runtime's paths, so that boto3's `sagemaker-runtime` client can call this server: POST
/endpoints/{name}/invocations and /endpoints/{name}/invocations-response-stream (any name), through
the model directory's code/inference.py when it has one, as /invocations."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost import sagemaker_runtime as wire
from llmhost.server.routes import deps
from llmhost.server.routes.sagemaker import invoke
from llmhost.server.serving.runtime import CustomCall, Runtime

router = APIRouter()


def _runtime(request: Request) -> Runtime:
    custom = deps.custom(request)
    call: CustomCall | None = None
    if custom is not None:

        async def call(req: Request, stream: bool, accept: str | None) -> Response:
            return await custom.invoke(req, invoke, accept=accept, stream=stream)

    return Runtime(deps.context(request).settings.model_name, deps.json_body, invoke, call)


@router.post(wire.INVOKE_PATH)
async def invoke_endpoint(name: str, request: Request) -> Response:
    return await _runtime(request).invoke(request, name, stream=False)


@router.post(wire.STREAM_PATH)
async def invoke_endpoint_with_response_stream(name: str, request: Request) -> Response:
    return await _runtime(request).invoke(request, name, stream=True)
