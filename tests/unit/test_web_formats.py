"""Each route declares its API's error format (web/formats.py): the refusals made around the route (the
API-key check) and by the route itself are written in it, on the server's real routers."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from llmhost.process.lifecycle import Lifecycle
from llmhost.server import errors
from llmhost.server.routes import anthropic, ollama, tgi
from llmhost.web.asgi import RequestContextMiddleware
from llmhost.web.auth import ApiKeyMiddleware, ApiKeys
from llmhost.web.formats import ANTHROPIC, OLLAMA, OPENAI, TGI, route_format

KEY = {"x-api-key": "k"}


def app() -> FastAPI:
    built = FastAPI()
    for module in (tgi, ollama, anthropic):
        built.include_router(module.router)
    errors.install(built)
    built.add_middleware(ApiKeyMiddleware, keys=ApiKeys.of(["k"]), routes=built.routes)
    built.add_middleware(RequestContextMiddleware, lifecycle=Lifecycle(), routes=built.routes)
    return built


async def post(path: str, method: str = "POST", **kw: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        return await c.request(method, path, **kw)


async def test_a_missing_key_is_refused_in_the_routes_format() -> None:
    openai_shaped = [await post("/generate"), await post("/", "GET"), await post("/info", "GET")]
    for r in openai_shaped:  # TGI's format covers its own refusals only; liveness and /info are plain
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", r.text
    for path in ("/api/chat", "/api/nothing"):  # Ollama's routes, and a path under them no route takes
        r = await post(path)
        assert r.status_code == 401 and isinstance(r.json()["error"], str), r.text
    r = await post("/v1/messages")
    assert r.status_code == 401 and r.json()["type"] == "error", r.text
    assert r.json()["error"]["type"] == "authentication_error" and r.json()["error"]["request_id"]


async def test_a_routes_own_refusal_is_in_its_format() -> None:
    tgi_bad = await post("/generate", content=b"{", headers=KEY)
    assert tgi_bad.status_code == 400 and tgi_bad.json()["error_type"] == "validation", tgi_bad.text
    assert tgi_bad.json()["field"] == "body" and tgi_bad.json()["request_id"]
    ollama_bad = await post("/api/chat", content=b"{", headers=KEY)
    assert ollama_bad.status_code == 400 and "not valid JSON" in ollama_bad.json()["error"], ollama_bad.text
    anthropic_bad = await post("/v1/messages", content=b"[]", headers=KEY)
    assert anthropic_bad.status_code == 400 and anthropic_bad.json()["type"] == "error", anthropic_bad.text


def test_route_format_finds_the_route_of_a_request() -> None:
    routes = app().routes

    def scope(path: str, method: str = "POST") -> dict[str, Any]:
        return {"type": "http", "path": path, "method": method, "root_path": "", "headers": []}

    assert route_format(scope("/generate"), routes) is TGI
    assert route_format(scope("/"), routes) is TGI  # TGI's compat generate; GET / is Ollama's liveness
    assert route_format(scope("/", "GET"), routes) is OPENAI
    assert route_format(scope("/api/tags", "GET"), routes) is OLLAMA
    assert route_format(scope("/api/tags", "DELETE"), routes) is OLLAMA  # a 405 on Ollama's path
    assert route_format(scope("/v1/messages/count_tokens"), routes) is ANTHROPIC
    assert route_format(scope("/v1/chat/completions"), routes) is OPENAI
