"""The OpenAPI document of `llmhost serve`: valid OpenAPI 3.1, every operation documented (request body
from the model that validates it, success, errors), the error bodies the app really sends match the
documented schema of their status, and /docs works from the package's own files.

The app runs over ASGI with an engine that is never started (the model "loading"): every path below
answers before a model would be needed, or answers the loading 503 itself."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from openapi_spec_validator import validate

from llmhost.console.apidoc import OpenReport
from llmhost.engine import AsyncEngine
from llmhost.process.lifecycle import Lifecycle
from llmhost.server import ServerSettings, create_app
from llmhost.server.protocol.anthropic import MessagesRequest
from llmhost.server.protocol.openai import ChatCompletionRequest, CompletionRequest
from llmhost.server.protocol.tgi import TGIRequest
from llmhost.server.routes import anthropic, embeddings, openai, ops, responses, runtime, sagemaker, tei, tgi
from llmhost.web.apidoc import DECLARED, DOC_KEY
from llmhost.web.auth import ApiKeys
from tests.unit.engine_fakes import FakeModel, config, engine_factory
from tests.unit.openapi_checks import app_routes, assert_every_operation_documented, check_documented

ROUTE_MODULES = (sagemaker, runtime, openai, anthropic, responses, embeddings, tei, tgi, ops)


def make_app(**settings: Any) -> FastAPI:
    cfg = config()
    engine = AsyncEngine("fake.gguf", cfg, load=lambda: engine_factory(FakeModel(), cfg))
    lifecycle = settings.pop("lifecycle", None)
    return create_app(ServerSettings(model_path=Path("fake.gguf"), engine=cfg, **settings), engine, lifecycle)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return make_app().openapi()


def test_document_is_valid_openapi_31(doc: dict[str, Any]) -> None:
    validate(doc)
    assert doc["openapi"].startswith("3.1")


def test_every_route_is_declared_and_documented(doc: dict[str, Any]) -> None:
    app = make_app()
    assert len(app_routes(app)) >= 19
    assert_every_operation_documented(app, doc, no_body=frozenset({"/v1/batches/{batch_id}/cancel"}))


def ref(doc: dict[str, Any], method: str, path: str) -> Any:
    return doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]


def component(model: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def unqualified(schema: dict[str, Any]) -> str:
    return re.sub(r"schemas/[A-Za-z_]*__", "schemas/", json.dumps(schema, sort_keys=True))


def test_request_bodies_are_the_validating_models(doc: dict[str, Any]) -> None:
    assert ref(doc, "post", "/v1/completions") == component(CompletionRequest)
    assert ref(doc, "post", "/v1/messages") == component(MessagesRequest)
    assert ref(doc, "post", "/generate") == component(TGIRequest)
    invocations = ref(doc, "post", "/invocations")["oneOf"]
    assert component(ChatCompletionRequest) in invocations and component(TGIRequest) in invocations
    schemas = doc["components"]["schemas"]
    # the model's own JSON schema: its constraints and closed objects are the document's
    for model in (CompletionRequest, MessagesRequest, TGIRequest):
        own = model.model_json_schema(ref_template="#/components/schemas/{model}")
        # (a name two modules share, such as Tool, is qualified by its module in the document)
        own_body = {k: v for k, v in own.items() if k != "$defs"}
        assert unqualified(own_body) == unqualified(schemas[model.__name__])
        names = {re.sub(r"^[A-Za-z_]*__", "", name) for name in schemas}
        assert set(own.get("$defs", {})) <= names
    completion = schemas["CompletionRequest"]
    assert completion["additionalProperties"] is False
    assert completion["properties"]["temperature"] == {
        "default": 1.0,
        "maximum": 2.0,
        "minimum": 0.0,
        "title": "Temperature",
        "type": "number",
    }
    assert "max_total_tokens" not in json.dumps(completion)
    assert "422 naming the field and the limit" in doc["paths"]["/v1/completions"]["post"]["description"]


def test_streams_and_probes_have_their_real_content_types(doc: dict[str, Any]) -> None:
    def content(path: str, method: str = "post", status: str = "200") -> set[str]:
        return set(doc["paths"][path][method]["responses"][status].get("content", {}))

    assert content("/v1/chat/completions") == {"application/json", "text/event-stream"}
    assert content("/generate_stream") == {"text/event-stream"}
    assert content("/metrics", "get") == {"text/plain"}
    assert content("/ping", "get") == set() and content("/ping", "get", "503") == set()
    assert content("/health", "get", "503") == {"application/json"}
    assert "Retry-After" in doc["paths"]["/v1/completions"]["post"]["responses"]["429"]["headers"]
    stream = "/endpoints/{name}/invocations-response-stream"
    assert content(stream) == {"application/vnd.amazon.eventstream"}


# -- the documented error schema is what the server sends ------------------------------------------------
async def call(app: FastAPI, method: str, path: str, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        return await c.request(method, path, **kw)


CHAT = {"messages": [{"role": "user", "content": "hi"}]}
MESSAGE = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
CASES: list[tuple[str, str, Any, int]] = [
    # (path, body: JSON value or raw bytes, expected status)
    ("/v1/completions", b'{"prompt": ', 400),
    ("/v1/completions", {"prompt": "x", "frobnicate": 1}, 400),
    ("/v1/completions", {"prompt": "x", "max_tokens": "5"}, 422),
    ("/v1/completions", {"prompt": "x", "max_tokens": 2}, 503),  # the model is loading
    ("/v1/chat/completions", {**CHAT, "stream": 0}, 422),
    ("/v1/responses", {"input": "x", "store": True}, 400),
    ("/v1/embeddings", {"input": "x", "dimensions": 0}, 422),
    # a generation server's embeddings context, of a model file that is not there
    ("/v1/embeddings", {"input": "x"}, 503),
    ("/embed", {"inputs": "x", "prompt_name": "query"}, 422),
    ("/embed", {"inputs": []}, 400),
    ("/embed", {"inputs": "x", "normalize": 1}, 422),
    ("/tokenize", {"content": 5}, 422),
    ("/detokenize", {"tokens": [True]}, 422),
    ("/generate", {"inputs": ""}, 422),
    ("/generate", {"inputs": "x", "parameters": {"best_of": 2}}, 422),
    ("/generate", {"inputs": "x", "parameters": {"max_new_tokens": 2}}, 503),
    ("/generate_stream", {"inputs": "x", "nope": 1}, 400),
    ("/", {"inputs": "x", "stream": "yes"}, 422),
    ("/invocations", {"inputs": "x", "parameters": {"top_p": 1.5}}, 422),
    ("/invocations", {"what": 1}, 422),
    ("/invocations", {**CHAT, "temperature": 9}, 422),
    ("/v1/messages", {**MESSAGE, "max_tokens": 0}, 400),
    ("/v1/messages", MESSAGE, 529),
    ("/v1/messages/count_tokens", {"model": "m", "messages": []}, 400),
    ("/endpoints/ep/invocations", None, 400),  # no body: the runtime's ValidationError
    ("/endpoints/ep/invocations", {"inputs": ""}, 424),  # the model's refusal: ModelError
    ("/endpoints/ep/invocations", {"inputs": "x"}, 503),
    ("/endpoints/ep/invocations-response-stream", {"prompt": 3}, 424),
    # schemathesis's findings (negative_data_rejection): values of another JSON type were converted
    ("/v1/completions", {"prompt": "x", "echo": 0}, 422),
    ("/tokenize", {"content": "x", "with_pieces": 0}, 422),
    (
        "/v1/messages/count_tokens",
        {
            "model": "m",
            "messages": MESSAGE["messages"],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": 0},
        },
        400,
    ),
    ("/v1/responses", {"input": "x", "store": 0}, 422),
    ("/generate", {"inputs": "x", "parameters": {"watermark": 0}}, 422),
    ("/generate", {"inputs": "x", "parameters": {"best_of": True}}, 422),
    ("/endpoints/ep/invocations-response-stream", {"inputs": "x", "stream": {}}, 424),
]


def template(path: str) -> str:
    return "/endpoints/{name}/" + path.rsplit("/", 1)[1] if path.startswith("/endpoints/") else path


@pytest.mark.parametrize(("path", "body", "status"), CASES)
async def test_error_bodies_match_the_documented_schema(
    doc: dict[str, Any], path: str, body: Any, status: int
) -> None:
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"} if body is not None else {}
    r = await call(make_app(), "POST", path, content=raw, headers=headers)
    assert r.status_code == status, r.text
    check_documented(doc, "post", template(path), r)


async def test_401_413_and_draining_503_match_the_documented_schema(doc: dict[str, Any]) -> None:
    keyed = make_app(api_keys=ApiKeys.of(["k1"]))
    r = await call(keyed, "POST", "/v1/completions", json={"prompt": "x"})
    assert r.status_code == 401
    check_documented(doc, "post", "/v1/completions", r)
    r = await call(keyed, "POST", "/v1/messages", json=MESSAGE)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    check_documented(doc, "post", "/v1/messages", r)
    small = make_app(max_body_bytes=64)
    r = await call(small, "POST", "/generate", json={"inputs": "x" * 100})
    assert r.status_code == 413
    check_documented(doc, "post", "/generate", r)
    lifecycle = Lifecycle()
    lifecycle.drain("test")
    draining = make_app(lifecycle=lifecycle)
    for path in ("/v1/chat/completions", "/generate", "/endpoints/{name}/invocations"):
        r = await call(draining, "POST", path.replace("{name}", "ep"), json=CHAT)
        assert r.status_code == 503
        check_documented(doc, "post", path, r)
    r = await call(draining, "GET", "/health")
    assert r.status_code == 503
    check_documented(doc, "get", "/health", r)


def test_api_keys_are_documented_as_security() -> None:
    doc = make_app(api_keys=ApiKeys.of(["k1"])).openapi()
    validate(doc)
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    assert doc["paths"]["/ping"]["get"]["security"] == []
    assert "security" not in doc["paths"]["/v1/completions"]["post"]


def test_every_declaration_is_used_once() -> None:
    found = [r for m in ROUTE_MODULES for r in m.router.routes if isinstance(r, APIRoute)]
    keys = [r.openapi_extra[DOC_KEY] for r in found if r.openapi_extra and DOC_KEY in r.openapi_extra]
    assert len(keys) == len(set(keys)) and set(keys) <= set(DECLARED)


# -- /docs offline --------------------------------------------------------------------------------------
async def test_docs_page_loads_swagger_ui_from_the_package() -> None:
    app = make_app()
    page = await call(app, "GET", "/docs")
    assert page.status_code == 200
    assert "cdn" not in page.text.lower() and "/docs/static/swagger-ui-bundle.js" in page.text
    assert "/openapi.json" in page.text
    for asset, media in (("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "text/css")):
        r = await call(app, "GET", f"/docs/static/{asset}")
        assert r.status_code == 200 and media in r.headers["content-type"] and len(r.content) > 10_000
    r = await call(app, "GET", "/openapi.json")
    assert r.status_code == 200 and r.json()["paths"]


async def test_docs_and_document_open_without_a_key() -> None:
    """A browser opening /docs sends no key: the page, its assets and the document answer without one
    (they hold no data of the server's); every operation still needs one."""
    app = make_app(api_keys=ApiKeys.of(["k1"]))
    for path in ("/docs", "/docs/static/swagger-ui.css", "/openapi.json"):
        r = await call(app, "GET", path)
        assert r.status_code == 200, path
    for path in ("/v1/models", "/docs-x", "/openapi.json/x", "/metrics"):
        r = await call(app, "GET", path)
        assert r.status_code == 401, path


# -- the console's JSON API ------------------------------------------------------------------------------
@pytest.fixture
def reports(tmp_path: Path) -> Path:
    run = tmp_path / "run-1"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"requests": 3}))
    (run / "report.html").write_text("<html>report</html>")
    return tmp_path


CONSOLE_CASES: list[tuple[str, str, Any, int]] = [
    # (method, path, body, status): real answers of `llmhost serve`'s console API, a reports folder open
    ("get", "/console/api/overview", None, 200),
    ("get", "/console/api/series", None, 200),
    ("get", "/console/api/series?since=0", None, 200),
    ("get", "/console/api/series?since=soon", None, 422),
    ("get", "/console/api/series?since=nan", None, 422),
    ("get", "/console/api/metrics", None, 200),
    ("get", "/console/api/metrics?window=60", None, 200),
    ("get", "/console/api/metrics?window=0", None, 422),
    ("get", "/console/api/metrics?window=1e9", None, 422),
    ("get", "/console/api/reports", None, 200),
    ("get", "/console/api/reports/run-1/summary.json", None, 200),
    ("get", "/console/api/reports/run-1/report.html", None, 200),
    ("get", "/console/api/reports/run-1/nothing.csv", None, 404),
    ("get", "/console/api/reports/run-1/x.exe", None, 422),
    ("get", "/console/api/reports/" + "x" * 300 + ".html", None, 404),  # schemathesis: was a 500
    ("get", "/console/api/reports/a%00b.html", None, 404),  # schemathesis: was a 500
    ("post", "/console/api/reports/open", {"path": "run-1/report.html"}, 200),
    ("post", "/console/api/reports/open", {"path": "../secret.json"}, 404),
    ("post", "/console/api/reports/open", {}, 422),
    ("post", "/console/api/reports/open", {"path": 5}, 422),
    ("post", "/console/api/reports/open", {"path": "run-1/report.html", "more": 1}, 422),
    ("post", "/console/api/reports/open", b"{", 422),
    ("post", "/console/api/reports/open", [], 422),
]


def console_template(path: str) -> str:
    path = path.split("?")[0]
    reports = "/console/api/reports/"
    return reports + "{path}" if path.startswith(reports) and path != reports + "open" else path


@pytest.mark.parametrize(("method", "path", "body", "status"), CONSOLE_CASES)
async def test_console_answers_match_the_documented_schema(
    doc: dict[str, Any], reports: Path, method: str, path: str, body: Any, status: int
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    kw: dict[str, Any] = {}
    if body is not None:
        kw = {"content": raw, "headers": {"content-type": "application/json"}}
    r = await call(make_app(reports=str(reports)), method.upper(), path, **kw)
    assert r.status_code == status, r.text
    if status == 422:
        param = path.split("?")[1].split("=")[0] if "?" in path else "path"
        assert r.json()["error"]["field"] == param
    check_documented(doc, method, console_template(path), r)


async def test_console_refusals_match_the_documented_schema(doc: dict[str, Any]) -> None:
    """Without a reports folder (404), without a key (401), and draining (503)."""
    r = await call(make_app(), "GET", "/console/api/reports")
    assert r.status_code == 200 and r.json() == {"dir": None, "reports": []}
    check_documented(doc, "get", "/console/api/reports", r)
    r = await call(make_app(), "POST", "/console/api/reports/open", json={"path": "a/report.html"})
    assert r.status_code == 404
    check_documented(doc, "post", "/console/api/reports/open", r)
    keyed = make_app(api_keys=ApiKeys.of(["k1"]))
    lifecycle = Lifecycle()
    lifecycle.drain("test")
    draining = make_app(lifecycle=lifecycle)
    for app, status in ((keyed, 401), (draining, 503)):
        for method, path in (
            ("get", "/console/api/overview"),
            ("get", "/console/api/series"),
            ("get", "/console/api/metrics"),
            ("get", "/console/api/reports"),
            ("get", "/console/api/reports/{path}"),
            ("post", "/console/api/reports/open"),
        ):
            r = await call(app, method.upper(), path.replace("{path}", "a/b.json"), json={"path": "a"})
            assert r.status_code == status, (path, r.text)
            check_documented(doc, method, path, r)


def test_console_api_is_documented_the_page_is_not(doc: dict[str, Any]) -> None:
    paths = doc["paths"]
    assert {
        "/console/api/overview",
        "/console/api/series",
        "/console/api/metrics",
        "/console/api/reports",
        "/console/api/reports/{path}",
        "/console/api/reports/open",
    } <= set(paths)
    assert not {"/console", "/console/", "/console/view", "/console/assets/{name}"} & set(paths)
    window = paths["/console/api/metrics"]["get"]["parameters"]
    assert [(w["name"], w["in"], w["required"], w["schema"]) for w in window] == [
        ("window", "query", False, {"type": "number", "exclusiveMinimum": 0, "maximum": 900.0})
    ]
    assert paths["/console/api/series"]["get"]["parameters"][0]["name"] == "since"
    body = paths["/console/api/reports/open"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == component(OpenReport)
    assert doc["components"]["schemas"]["OpenReport"]["additionalProperties"] is False
    assert {"401", "422", "500", "503"} <= set(paths["/console/api/metrics"]["get"]["responses"])
