"""Access to the serving objects stored on the app."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from llmhost.server.errors import APIError, invalid_json
from llmhost.server.serving.context import ServingContext
from llmhost.server.serving.openai import OpenAIServing
from llmhost.server.serving.tgi import TGIServing


def context(request: Request) -> ServingContext:
    ctx: ServingContext = request.app.state.serving
    return ctx


def openai(request: Request) -> OpenAIServing:
    serving: OpenAIServing = request.app.state.openai
    return serving


def tgi(request: Request) -> TGIServing:
    serving: TGIServing = request.app.state.tgi
    return serving


async def json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid_json(str(exc)) from exc
    if not isinstance(body, dict):
        raise APIError(422, "request body must be a JSON object", field="body")
    return body
