"""The endpoint router's OpenAPI document: valid, every operation of the app (relayed routes, probes, admin
API) documented, a relayed route documenting the copy's own request model plus the router's refusals,
and every refusal and admin answer matching the documented schema of its status. No copy is started:
the relayed answers come from fake copies behind an injected transport (httpx.MockTransport)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from openapi_spec_validator import validate

from llmhost.endpoint.admin import YAML_TYPES
from llmhost.endpoint.app import create_app
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.manager import EndpointManager
from llmhost.endpoint.control.placement import Ledger
from llmhost.endpoint.dataplane.router import COMPONENT_HEADER
from llmhost.endpoint.dataplane.runtime import create_runtime_router
from llmhost.endpoint.rayserve.console import ClusterFigures
from llmhost.endpoint.rayserve.ingress import Ingress
from llmhost.endpoint.rayserve.options import AppArgs, RayTiming
from llmhost.endpoint.spec import parse_endpoint
from llmhost.process.lifecycle import Lifecycle
from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.store import ResolvedModel
from llmhost.web.auth import ApiKeys
from tests.unit.endpoint.ray_fakes import URL, FakeServe, deployment, replica
from tests.unit.endpoint.test_router import Registry, app_for, component
from tests.unit.openapi_checks import assert_every_operation_documented, check_documented

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
MESSAGE = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def make_app(
    tmp_path: Path,
    names: tuple[str, ...] = ("a",),
    keys: ApiKeys | None = None,
    lifecycle: Lifecycle | None = None,
) -> FastAPI:
    spec = parse_endpoint({"name": "ep", "components": [{"name": n, "copies": 1} for n in names]})
    manager = EndpointManager(spec, ledger=Ledger(cpus=[0], memory_mb=2000), log_dir=tmp_path)
    for comp in spec.components:
        manager.components[comp.name] = Component(comp, ResolvedModel(tmp_path / "m.gguf"))
    # its lifespan (starting copies) is not run here; /admin/down must not stop the test process
    return create_app(manager, shutdown=lambda: None, lifecycle=lifecycle or Lifecycle(), keys=keys)


@pytest.fixture
def doc(tmp_path: Path) -> dict[str, Any]:
    return make_app(tmp_path).openapi()


def test_document_is_valid_and_every_operation_documented(tmp_path: Path, doc: dict[str, Any]) -> None:
    validate(doc)
    app = make_app(tmp_path)
    expected = {
        "/v1/chat/completions",
        "/v1/messages",
        "/generate",
        "/invocations",
        "/tokenizer_info",
        "/info",
        "/execution-parameters",
        "/endpoints/{name}/invocations",
        "/ping",
        "/health",
        "/metrics",
        "/v1/models",
        "/admin/status",
        "/admin/scale",
        "/admin/components",
        "/admin/components/{name}",
        "/admin/down",
    }
    assert expected <= set(doc["paths"])
    no_body = {"/admin/down", "/admin/models/reload", "/v1/batches/{batch_id}/cancel"}
    assert_every_operation_documented(app, doc, no_body=frozenset(no_body))


def test_an_undeclared_route_fails_the_walk(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    app.add_api_route("/extra", lambda: {}, methods=["POST"])
    with pytest.raises(AssertionError):
        assert_every_operation_documented(app, app.openapi())


def test_relayed_routes_document_the_copys_model_and_the_routers_refusals(doc: dict[str, Any]) -> None:
    chat = doc["paths"]["/v1/chat/completions"]["post"]
    schema = chat["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": f"#/components/schemas/{ChatCompletionRequest.__name__}"}
    assert doc["components"]["schemas"]["ChatCompletionRequest"]["additionalProperties"] is False
    assert {"400", "401", "404", "413", "422", "429", "502", "503", "504"} <= set(chat["responses"])
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert "`model`" in chat["description"]
    messages = doc["paths"]["/v1/messages"]["post"]["responses"]
    assert "529" in messages and "503" not in messages
    runtime = doc["paths"]["/endpoints/{name}/invocations"]["post"]["responses"]
    assert {"400", "424", "503"} <= set(runtime)
    admin = doc["paths"]["/admin/scale"]["post"]
    assert admin["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("ScaleRequest")
    assert {"200", "202", "403", "404", "409", "422"} <= set(admin["responses"])
    assert set(doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}


def test_api_keys_are_documented_as_security(tmp_path: Path) -> None:
    doc = make_app(tmp_path, keys=ApiKeys.of(["k1"])).openapi()
    validate(doc)
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    assert doc["paths"]["/ping"]["get"]["security"] == []
    assert "security" not in doc["paths"]["/admin/status"]["get"]


async def call(app: FastAPI, method: str, path: str, client: str = "127.0.0.1", **kw: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=(client, 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://s") as c:
        return await c.request(method, path, **kw)


ROUTER_CASES: list[tuple[str, str, Any, int]] = [
    # (method, path, body, status) against the whole app: its own refusals and admin answers
    ("post", "/v1/chat/completions", {"model": "zzz", **CHAT}, 404),
    ("post", "/v1/messages", {"model": "zzz", **MESSAGE}, 404),
    ("post", "/generate", {"inputs": "x"}, 400),  # two components, none named
    ("post", "/endpoints/{name}/invocations", {"inputs": "x"}, 400),
    ("post", "/v1/messages", MESSAGE, 400),
    ("get", "/tokenizer_info", None, 400),
    ("get", "/info", None, 400),
    ("post", "/admin/scale", {"component": "a", "copies": "2"}, 422),
    ("post", "/admin/scale", b"{", 422),
    ("post", "/admin/scale", {"component": "zzz", "copies": 1}, 404),
    ("post", "/admin/scale", {"component": "a", "copies": 0}, 200),  # no copy running: nothing to do
    ("post", "/admin/scale", {"component": "a", "copies": 0, "wait": False}, 202),
    ("post", "/admin/components", {"name": "a"}, 409),
    ("post", "/admin/components", {"components": []}, 422),
    ("delete", "/admin/components/{name}", None, 404),
    ("delete", "/admin/components/b", None, 200),
    ("post", "/admin/down", None, 202),
    ("get", "/ping", None, 200),  # no copy running, none wanted (scaled to zero): can serve
    ("get", "/health", None, 200),
    ("get", "/v1/models", None, 200),
    ("get", "/admin/status", None, 200),
    # the console's JSON API (no reports folder)
    ("get", "/console/api/overview", None, 200),
    ("get", "/console/api/series?since=12", None, 200),
    ("get", "/console/api/series?since=x", None, 422),
    ("get", "/console/api/metrics?window=30", None, 200),
    ("get", "/console/api/metrics?window=-1", None, 422),
    ("get", "/console/api/reports", None, 200),
    ("get", "/console/api/reports/{path}", None, 404),
    ("post", "/console/api/reports/open", {"path": "a/report.html"}, 404),
    ("post", "/console/api/reports/open", {"path": ["a"]}, 422),
]


def template(path: str) -> str:
    path = path.split("?")[0]
    if path.startswith("/console/api/reports/") and not path.endswith("/open"):
        return "/console/api/reports/{path}"
    return "/admin/components/{name}" if path.startswith("/admin/components/") else path


@pytest.mark.parametrize(("method", "path", "body", "status"), ROUTER_CASES)
async def test_the_routers_answers_match_the_documented_schema(
    tmp_path: Path, method: str, path: str, body: Any, status: int
) -> None:
    app = make_app(tmp_path, ("a", "b"))
    doc = app.openapi()
    kw: dict[str, Any] = {}
    if isinstance(body, bytes):
        kw = {"content": body, "headers": {"content-type": "application/json"}}
    elif body is not None:
        kw = {"json": body}
    r = await call(app, method.upper(), path.replace("{name}", "zzz").replace("{path}", "a/b.json"), **kw)
    assert r.status_code == status, r.text
    check_documented(doc, method, template(path), r)


async def test_components_are_added_from_yaml_as_documented(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    doc = app.openapi()
    body = doc["paths"]["/admin/components"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", *YAML_TYPES}
    assert body["application/yaml"] == body["application/json"]
    for text, status in (("name: a\ncopies: 1\n", 409), ("name: [a\n", 422), ("- 1\n", 422)):
        r = await call(
            app,
            "POST",
            "/admin/components",
            content=text.encode(),
            headers={"content-type": "application/yaml"},
        )
        assert r.status_code == status, r.text
        check_documented(doc, "post", "/admin/components", r)


async def test_a_draining_endpoints_probes_match_the_documented_schema(tmp_path: Path) -> None:
    lifecycle = Lifecycle()
    lifecycle.drain("test")
    app = make_app(tmp_path, lifecycle=lifecycle)
    doc = app.openapi()
    for path in ("/ping", "/health"):
        r = await call(app, "GET", path)
        assert r.status_code == 503, (path, r.text)
        check_documented(doc, "get", path, r)


async def test_401_and_403_match_the_documented_schema(tmp_path: Path) -> None:
    app = make_app(tmp_path, keys=ApiKeys.of(["k1"]))
    doc = app.openapi()
    for method, path in (
        ("post", "/v1/chat/completions"),
        ("post", "/v1/messages"),
        ("get", "/admin/status"),
        ("get", "/metrics"),
        ("post", "/endpoints/{name}/invocations"),
        ("post", "/admin/down"),
        ("post", "/admin/scale"),
        ("get", "/console/api/overview"),
        ("get", "/console/api/metrics"),
        ("post", "/console/api/reports/open"),
    ):
        r = await call(app, method.upper(), path.replace("{name}", "ep"), json=CHAT)
        assert r.status_code == 401, (path, r.text)
        check_documented(doc, method, path, r)
    r = await call(app, "GET", "/admin/status", client="10.1.2.3", headers={"x-api-key": "k1"})
    assert r.status_code == 403
    check_documented(doc, "get", "/admin/status", r)


def failing_copies(kind: str) -> Any:
    """Fake copies that fail as `kind` says: `refuse` connections (never taken: 503 once the wait is
    over), `reset` after reading the request (502), or time out reading the answer (504)."""

    async def handle(request: httpx.Request) -> httpx.Response:
        if kind == "refuse":
            raise httpx.ConnectError("connection refused", request=request)
        if kind == "reset":
            raise httpx.RemoteProtocolError("Server disconnected without a response.", request=request)
        raise httpx.ReadTimeout("timed out", request=request)

    return handle


RELAY_CASES = [
    ("refuse", "/v1/chat/completions", 503),
    ("reset", "/v1/chat/completions", 502),
    ("timeout", "/generate", 504),
    ("reset", "/v1/messages", 502),
    ("refuse", "/v1/messages", 529),
    ("reset", "/endpoints/{name}/invocations", 424),
    ("refuse", "/endpoints/{name}/invocations", 503),
    ("timeout", "/endpoints/{name}/invocations-response-stream", 424),
]


@pytest.mark.parametrize(("kind", "path", "status"), RELAY_CASES)
async def test_relay_failures_match_the_documented_schema(
    tmp_path: Path, kind: str, path: str, status: int
) -> None:
    doc = make_app(tmp_path).openapi()
    registry = Registry(component("a", [1001], tmp_path), wait_s=0.2)
    app, proxy = app_for(registry, failing_copies(kind))
    app.include_router(create_runtime_router(registry, proxy))
    body = {"model": "a", **MESSAGE} if path == "/v1/messages" else {"inputs": "x", **CHAT}
    r = await call(
        app,
        "POST",
        path.replace("{name}", "ep"),
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json", COMPONENT_HEADER: "a"},
    )
    assert r.status_code == status, r.text
    check_documented(doc, "post", path, r)
    await proxy.aclose()


async def test_invoke_endpoint_documents_the_stream_it_relays(tmp_path: Path, doc: dict[str, Any]) -> None:
    """InvokeEndpoint with a body that asks to stream relays the container's server-sent events (a TGI
    body with `stream: true`, which schemathesis found undocumented): its 200 documents them."""
    events = b'data:{"token": {"id": 1, "text": "x"}}\n\n'

    class Events(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield events

    async def streaming_copy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Events())

    registry = Registry(component("a", [1001], tmp_path))
    app, proxy = app_for(registry, streaming_copy)
    app.include_router(create_runtime_router(registry, proxy))
    r = await call(
        app,
        "POST",
        "/endpoints/ep/invocations",
        content=b'{"inputs": "x", "stream": true}',
        headers={"content-type": "application/json", COMPONENT_HEADER: "a"},
    )
    media = r.headers["content-type"].split(";")[0]
    assert r.status_code == 200 and media == "text/event-stream" and r.content == events
    documented = doc["paths"]["/endpoints/{name}/invocations"]["post"]["responses"]["200"]["content"]
    assert set(documented) == {"application/json", "text/event-stream"}
    await proxy.aclose()


# -- the Ray ingress: the same routes and document (Ray Serve's REST API faked in-process) ----------------
async def test_the_ray_ingress_documents_every_operation_and_answers_as_documented() -> None:
    serve = FakeServe()
    serve.app("e", deployments={"a": deployment(replica("a0"))})
    spec = parse_endpoint({"name": "e", "components": [{"name": "a", "copies": 1}]})
    args = AppArgs(spec.model_dump(), {}, asdict(RayTiming(placement_timeout_s=0.3)), URL, [], {}, "info")
    ingress = Ingress({"a": None}, asdict(args))
    ingress.api = serve.api()
    app = ingress.asgi_app()
    doc = app.openapi()
    validate(doc)
    no_body = {"/admin/down", "/admin/models/reload", "/v1/batches/{batch_id}/cancel"}
    assert_every_operation_documented(app, doc, no_body=frozenset(no_body))
    cases = [
        ("get", "/admin/status", None, 200),
        ("post", "/admin/scale", {"component": "a", "copies": 2, "wait": False}, 202),
        ("post", "/admin/scale", {"component": "a", "copies": 0}, 422),
        ("post", "/admin/components", {"name": "b"}, 501),  # a Ray endpoint's components are fixed
        ("post", "/v1/completions", {"model": "zzz", "prompt": "x"}, 404),
    ]
    for method, path, body, status in cases:
        r = await call(app, method.upper(), path, **({"json": body} if body is not None else {}))
        assert r.status_code == status, (path, r.text)
        check_documented(doc, method, path, r)


async def test_the_ray_ingress_serves_and_documents_the_console(tmp_path: Path) -> None:
    serve = FakeServe()
    serve.app("e", deployments={"a": deployment(replica("a0"))})
    spec = parse_endpoint({"name": "e", "components": [{"name": "a", "copies": 1}]})
    args = AppArgs(
        spec.model_dump(),
        {},
        asdict(RayTiming()),
        URL,
        [ApiKeys.of(["k1"]).digests[0].hex()],
        {},
        "info",
        console_period_s=1.0,
        reports_dir=str(tmp_path),
    )
    ingress = Ingress({"a": None}, asdict(args))
    ingress.api = serve.api()
    cluster = ClusterFigures([], {"CPU": 2.0, "memory": 2.0**31}, {"CPU": 1.0, "memory": 2.0**30})
    ingress.cluster = lambda: cluster
    app = ingress.asgi_app()
    doc = app.openapi()
    assert {"/console/api/overview", "/console/api/series", "/console/api/metrics"} <= set(doc["paths"])
    no_body = {"/admin/down", "/admin/models/reload", "/v1/batches/{batch_id}/cancel"}
    assert_every_operation_documented(app, doc, no_body=frozenset(no_body))
    assert (await call(app, "GET", "/console")).status_code == 200  # the page: no key, no data
    r = await call(app, "GET", "/console/api/overview")
    assert r.status_code == 401
    check_documented(doc, "get", "/console/api/overview", r)
    key = {"x-api-key": "k1"}
    await call(app, "GET", "/admin/status", headers=key)  # reads Ray Serve's details
    for path in (
        "/console/api/overview",
        "/console/api/series",
        "/console/api/metrics",
        "/console/api/reports",
    ):
        r = await call(app, "GET", path, headers=key)
        assert r.status_code == 200, (path, r.text)
        check_documented(doc, "get", path, r)
    o = (await call(app, "GET", "/console/api/overview", headers=key)).json()
    assert o["backend"] == "ray" and o["host"]["cpus_reserved"] == 1.0 and o["console"]["period_s"] == 1.0
    assert o["console"]["reports"] and o["admin"]["add_remove"] is False and o["unknown"]
    assert [r["state"] for r in o["components"][0]["replicas"]] == ["ready"]


# -- an unknown path or method: the API's error body with the request's id, never FastAPI's {"detail"} ----
def ray_ingress_app() -> FastAPI:
    serve = FakeServe()
    serve.app("e", deployments={"a": deployment(replica("a0"))})
    spec = parse_endpoint({"name": "e", "components": [{"name": "a", "copies": 1}]})
    args = AppArgs(spec.model_dump(), {}, asdict(RayTiming()), URL, [], {}, "info")
    ingress = Ingress({"a": None}, asdict(args))
    ingress.api = serve.api()
    return ingress.asgi_app()


@pytest.mark.parametrize("backend", ["local", "ray"])
async def test_an_unknown_path_or_method_answers_an_error_body_with_the_request_id(
    tmp_path: Path, backend: str
) -> None:
    app = make_app(tmp_path) if backend == "local" else ray_ingress_app()
    for method, path, status in [("GET", "/no/such/path", 404), ("DELETE", "/v1/chat/completions", 405)]:
        r = await call(app, method, path)
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["type"] == "http_error" and error["message"]
        assert error["request_id"] == r.headers["x-request-id"]
