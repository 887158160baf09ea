"""Checks shared by the OpenAPI tests of `llmhost serve` and the endpoint router: every operation of an app
documented, and an answer matching what the document says of its status."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
from fastapi import FastAPI
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts

from llmhost.web.apidoc import DOC_KEY

METHODS_WITH_BODY = {"POST", "PUT", "PATCH"}


def app_routes(app: FastAPI) -> list[RouteContext]:
    """Every operation the app serves and shows, whatever router or call added it (an included router's
    routes as the app serves them: FastAPI keeps them in the router it includes)."""
    return [
        c
        for c in iter_route_contexts(app.routes)
        if isinstance(c.original_route, APIRoute) and c.include_in_schema
    ]


def assert_every_operation_documented(
    app: FastAPI, doc: dict[str, Any], no_body: frozenset[str] = frozenset()
) -> None:
    """Each route of `app` is declared and its operation documented: the request body where the method
    takes one (but for the paths in `no_body`), a success response, error responses, a description
    of each status; FastAPI's placeholders (a 200 of `{}`, a 422 it never sends) gone."""
    routes = app_routes(app)
    assert [r.path for r in routes if not r.openapi_extra or DOC_KEY not in r.openapi_extra] == []
    for route in routes:
        path = route.path_format or ""  # as the document writes it: {path:path} is {path} there
        for method in route.methods or ():
            where = f"{method} {path}"
            op = doc["paths"].get(path, {}).get(method.lower())
            assert op is not None, f"{where}: not in the document"
            assert DOC_KEY not in op and op.get("summary"), where
            text = json.dumps(op)
            assert "Successful Response" not in text and "HTTPValidationError" not in text, where
            if method in METHODS_WITH_BODY and path not in no_body:
                media = op.get("requestBody", {}).get("content", {})
                assert media and all(m.get("schema") for m in media.values()), f"{where}: no request body"
            statuses = [int(s) for s in op["responses"]]
            assert any(200 <= s < 300 for s in statuses), f"{where}: no success response"
            assert any(s >= 400 for s in statuses), f"{where}: no error response"
            for status, response in op["responses"].items():
                assert response.get("description"), (where, status)
    documented = sum(len(item) for item in doc["paths"].values())
    assert documented == sum(len(r.methods or ()) for r in routes)


def check_documented(doc: dict[str, Any], method: str, path: str, r: httpx.Response) -> None:
    """The answer's status is documented for the operation, and its body (if any) matches that status's
    schema for its content type; the status's documented headers are sent."""
    responses = doc["paths"][path][method]["responses"]
    assert str(r.status_code) in responses, (path, r.status_code, r.text)
    documented = responses[str(r.status_code)]
    content = documented.get("content", {})
    if not r.content:
        assert not content, (path, r.status_code, "documented a body, sent none")
    else:
        media = r.headers.get("content-type", "").split(";")[0]
        assert media in content, (path, r.status_code, media)
        schema = {**content[media]["schema"], "components": doc["components"]}
        # a JSON body against its schema; any other (text, HTML) is documented as a string
        body = r.json() if media == "application/json" else r.text
        jsonschema.validate(body, schema, cls=jsonschema.Draft202012Validator)
    for header in documented.get("headers", {}):
        assert header.lower() in r.headers, (path, r.status_code, header)
