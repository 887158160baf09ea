"""The HTTP API of `llmhost serve`, from its app's OpenAPI document (`app.openapi()`): per operation its
method, path, summary, request body fields and statuses. Building the app loads no model."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from docsgen.md import cell, table
from llmhost.engine.config import EngineConfig
from llmhost.server import ServerSettings, create_app

METHODS = ("get", "post", "put", "patch", "delete")


@cache
def openapi() -> dict[str, Any]:
    app = create_app(ServerSettings(Path("model.gguf"), EngineConfig()))
    return app.openapi()


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    """(METHOD, path, operation) of every documented operation."""
    doc = openapi()
    return [
        (m.upper(), path, op)
        for path, item in doc.get("paths", {}).items()
        for m, op in item.items()
        if m in METHODS
    ]


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not ref:
        return schema
    name = ref.rsplit("/", 1)[-1]
    return dict(openapi().get("components", {}).get("schemas", {}).get(name, {}))


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(_type(s) for s in schema[key])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " | ".join(str(v) for v in schema["enum"])
    if "const" in schema:
        return repr(schema["const"])
    return str(schema.get("type", "any"))


def _body(op: dict[str, Any]) -> list[str]:
    content = op.get("requestBody", {}).get("content", {})
    out: list[str] = []
    for media, spec in content.items():
        schema = _resolve(spec.get("schema", {}))
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        title = schema.get("title") or _type(spec.get("schema", {}))
        out += [f"Request body `{media}`: `{title}`", ""]
        if props:
            rows = [
                [
                    f"`{name}`",
                    _type(p),
                    "yes" if name in required else "",
                    "" if "default" not in p else f"`{p['default']}`",
                    p.get("description", ""),
                ]
                for name, p in props.items()
            ]
            out += [table(["field", "type", "required", "default", "meaning"], rows), ""]
    return out


def render() -> str:
    doc = openapi()
    out = [
        f"OpenAPI {doc.get('openapi', '')}, `{doc.get('info', {}).get('title', '')}` "
        f"{doc.get('info', {}).get('version', '')}: {len(operations())} operations.",
        "",
    ]
    summary = [[f"`{m}`", f"`{p}`", cell(op.get("summary", ""))] for m, p, op in operations()]
    out += [table(["method", "path", "summary"], summary), ""]
    for method, path, op in operations():
        out += [f"### `{method} {path}`", ""]
        if op.get("description"):
            out += [op["description"].strip(), ""]
        out += _body(op)
        params = op.get("parameters", [])
        if params:
            rows = [
                [
                    f"`{p['name']}`",
                    p.get("in", ""),
                    _type(p.get("schema", {})),
                    "yes" if p.get("required") else "",
                    p.get("description", ""),
                ]
                for p in params
            ]
            out += [table(["parameter", "in", "type", "required", "meaning"], rows), ""]
        responses = op.get("responses", {})
        if responses:
            rows = [[f"`{code}`", r.get("description", "")] for code, r in responses.items()]
            out += [table(["status", "meaning"], rows), ""]
    return "\n".join(out)
