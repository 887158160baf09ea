"""SageMaker Runtime's paths on the endpoint (any endpoint name): X-Amzn-SageMaker-Inference-Component
picks the component (optional with one), its copy answers on the same path in the runtime's shapes and
the router relays that answer; the router's own refusals take the same shapes, so that boto3 raises
ValidationError, ServiceUnavailable or ModelError for them as for the copy's."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from llmhost.endpoint.apidoc import relay_doc
from llmhost.endpoint.control.variants import INVOKED_HEADER
from llmhost.endpoint.dataplane.routing import (
    COPY_HEADER,
    C,
    Components,
    Forwarder,
    by_header,
    header_adapter,
    with_adapter,
)
from llmhost.web import sagemaker_runtime as wire
from llmhost.web.asgi import request_id
from llmhost.web.responses import ErrorResponse


def refusal(response: Response, endpoint: str, component: str, rid: str) -> Response:
    """A refusal of the router (its own, or a copy's JSON error it relays) in the runtime's shape."""
    if isinstance(response, ErrorResponse):
        original = bytes(JSONResponse(response.error.body()).body).decode()
        message = response.error.message
    else:
        original = bytes(response.body).decode(errors="replace")
        try:
            message = str(json.loads(original)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = original
    status = response.status_code
    if status in (429, 503):
        return wire.service_unavailable(message, rid, response.headers.get("retry-after"))
    if status < 500:  # no such component, or several and none named
        return wire.validation_error(message, rid)
    # the copy failed after the request reached it: the model's failure, not retried
    return wire.model_error(status, original, wire.log_stream(endpoint, component, rid), rid)


def create_runtime_router(registry: Components[C], proxy: Forwarder[C]) -> APIRouter:
    router = APIRouter()

    async def invoke(name: str, request: Request) -> Response:
        rid = request_id(request.scope)
        picked = by_header(registry, request.headers)
        if isinstance(picked, Response):
            return refusal(picked, name, request.headers.get(wire.COMPONENT, ""), rid)
        adapter = header_adapter(registry, request.headers)  # an adapter: its base's copy applies it
        response = await proxy.forward(
            with_adapter(request, adapter, picked.name), picked, await request.body()
        )
        if response.status_code >= 400 and COPY_HEADER not in response.headers:
            refused = refusal(response, name, picked.name, rid)
            if INVOKED_HEADER in response.headers:  # refused by the variant's copies' router
                refused.headers[INVOKED_HEADER] = response.headers[INVOKED_HEADER]
            return refused
        return response

    for path in (wire.INVOKE_PATH, wire.STREAM_PATH):
        router.add_api_route(path, invoke, methods=["POST"], openapi_extra=relay_doc("POST", path, "header"))
    return router
