"""Access to the serving objects stored on the app."""

from __future__ import annotations

from starlette.requests import Request

from llmhost.process.lifecycle import Lifecycle
from llmhost.server.protocol.limits import parse_json
from llmhost.server.serving.adapter_admin import AdapterAdmin
from llmhost.server.serving.adapters import ADAPTER_HEADER, header_selects
from llmhost.server.serving.apis.custom import CustomInference
from llmhost.server.serving.apis.embeddings import EmbeddingsServing
from llmhost.server.serving.apis.openai import OpenAIServing
from llmhost.server.serving.apis.rerank_apis import RerankAPIs
from llmhost.server.serving.apis.tgi import TGIServing
from llmhost.server.serving.apis.transcriptions import AudioTextServing
from llmhost.server.serving.batch_transform import BatchTransform
from llmhost.server.serving.context import ServingContext
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError


def context(request: Request) -> ServingContext:
    ctx: ServingContext = request.app.state.serving
    return ctx


def lifecycle(request: Request) -> Lifecycle:
    state: Lifecycle = request.app.state.lifecycle
    return state


def custom(request: Request) -> CustomInference | None:
    """The model directory's inference.py, if it has one."""
    handlers: CustomInference | None = getattr(request.app.state, "custom", None)
    return handlers


def adapter_admin(request: Request) -> AdapterAdmin:
    admin: AdapterAdmin = request.app.state.adapter_admin
    return admin


def openai(request: Request) -> OpenAIServing:
    serving: OpenAIServing = request.app.state.openai
    return serving


def audio_text(request: Request) -> AudioTextServing:
    serving: AudioTextServing = request.app.state.audio_text
    return serving


def tgi(request: Request) -> TGIServing:
    serving: TGIServing = request.app.state.tgi
    return serving


def embeddings(request: Request) -> EmbeddingsServing:
    serving: EmbeddingsServing = request.app.state.embeddings
    return serving


def rerank(request: Request) -> RerankAPIs:
    serving: RerankAPIs = request.app.state.rerank
    return serving


def batch(request: Request) -> BatchTransform:
    """SageMaker Batch Transform's parameters and JSON Lines bodies."""
    serving: BatchTransform = request.app.state.batch
    return serving


def with_header_adapter(request: Request, body: JSONObject) -> JSONObject:
    """The body selecting the adapter SageMaker's adapter header names (/invocations, TGI's routes)."""
    ctx = context(request)
    adapter = request.headers.get(ADAPTER_HEADER)
    return header_selects(ctx.adapters, adapter, body, ctx.settings.model_name)  # type: ignore[no-any-return]


async def json_body(request: Request) -> JSONObject:
    """The client's body, a JSON object of any shape: the route's request model reads it."""
    body = parse_json(await request.body())
    if not isinstance(body, dict):
        raise APIError(422, "request body must be a JSON object", field="body")
    return body
