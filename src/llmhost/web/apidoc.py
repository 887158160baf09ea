"""The OpenAPI document, written from the pydantic models that validate each request.

Routes read their bodies themselves (llmhost's JSON limits, then the protocol model: the 400 / 422 bodies
clients expect); each declares what it takes and answers with `operation(...)`, and `install` builds
/openapi.json from those declarations: the request models' JSON schemas (the very models the route
validates with), the success bodies (JSON, `text/event-stream` where `stream: true`), and each error
status with the body llmhost sends for it. /docs is Swagger UI served from the package (no CDN).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Literal

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles

from llmhost.shared.jsontypes import JSONObject, JSONValue
from llmhost.web.auth import DOC_ASSETS

DOC_KEY = "x-llmhost-operation"
REF = "#/components/schemas/{model}"
SSE = "text/event-stream"
Style = Literal["openai", "tgi", "tei", "anthropic", "sagemaker", "ollama", "none"]
# how an error status is answered: in one of llmhost's error shapes, with a model's body, "none": no body
Shape = Style | type[BaseModel]


# -- error bodies -----------------------------------------------------------------------------------------
class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorDetail(Open):
    message: str
    type: str
    param: str | None
    code: int
    field: str | None = None
    limit: int | float | None = None
    request_id: str | None = None


class OpenAIError(Open):
    """OpenAI's error shape, plus `field` (what was wrong) and `limit` (the bound it broke)."""

    error: ErrorDetail


class TGIError(Open):
    """TGI's error shape (its clients raise ValidationError, OverloadedError... from `error_type`)."""

    error: str
    error_type: Literal["validation", "overloaded", "generation"]
    field: str | None = None


class TEIError(Open):
    """TEI's (text-embeddings-inference's) error shape."""

    error: str
    error_type: Literal["Validation", "Empty", "Overloaded", "Unhealthy", "Backend"]
    field: str | None = None


class AnthropicErrorDetail(Open):
    type: str
    message: str


class AnthropicError(Open):
    """Anthropic's error shape (422 is a 400 there, 429 and 503 a 529 `overloaded_error`)."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class SageMakerError(Open):
    """SageMaker Runtime's error shape: ValidationError (400), ModelError (424: the model's own status and
    body in OriginalStatusCode / OriginalMessage), ServiceUnavailable (503)."""

    message: str
    Message: str


class OllamaError(Open):
    """Ollama's error shape (a validation error is a 400 there); llmhost adds `field` and `limit`."""

    error: str
    field: str | None = None
    limit: int | float | None = None


ERROR_MODELS: dict[str, type[BaseModel]] = {
    "openai": OpenAIError,
    "tgi": TGIError,
    "tei": TEIError,
    "anthropic": AnthropicError,
    "sagemaker": SageMakerError,
    "ollama": OllamaError,
}
DESCRIPTIONS = {
    202: "Accepted: the work is under way",
    400: "Invalid request: not JSON, an unsupported field or value (the body names the field)",
    401: "No accepted API key (Authorization: Bearer KEY, or x-api-key)",
    403: "Forbidden",
    404: "Not found (the body names what)",
    409: "Conflict with the endpoint's state",
    501: "Not supported by this endpoint (a Ray endpoint's components are fixed)",
    413: "Request body larger than the server's limit (--max-payload-mb; the body names it)",
    422: "A value out of range, or over this server's token limits (the body names the field and limit)",
    424: "The model refused or failed the request (ModelError: its status and body)",
    429: "The queue is full: retry after Retry-After seconds",
    500: "Unexpected server error (the body carries the request id)",
    502: "The copy that had the request failed",
    503: "Model loading, or the server draining: retry after Retry-After seconds",
    504: "The copy did not answer in time",
    529: "Overloaded (Anthropic's status for a full queue, a loading model or a draining server)",
}
RETRY_STATUSES = (429, 503, 529)
# one server-sent event (with `stream: true`): its data a JSON chunk of the API's stream, or `[DONE]`
SSE_EVENT: JSONObject = {
    "type": "object",
    "required": ["data"],
    "description": "One server-sent event of the stream",
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
}


@dataclass(frozen=True)
class Operation:
    """What one route takes and answers, for the document."""

    summary: str
    body: Sequence[type[BaseModel]] = ()  # the request models (several: a oneOf, as /invocations reads)
    success: Sequence[type[BaseModel]] | type[BaseModel] | None = None  # the JSON answer (anyOf several)
    status: int = 200
    stream: bool = False  # answers text/event-stream with `stream: true`
    media: dict[str, str] = field(default_factory=dict)  # other success content: media type -> text
    errors: dict[int, Sequence[Shape]] = field(default_factory=dict)  # status -> the shapes sent
    description: str = ""
    params: Sequence[JSONObject] = ()  # the query parameters the route reads itself (OpenAPI objects)
    body_media: Sequence[str] = ()  # media types the body may come in besides JSON (the same schema)
    json_body: bool = True  # False: the body comes only in `body_media` (a multipart upload)

    def extra(self) -> JSONObject:
        """The route's `openapi_extra`: a key to this declaration (FastAPI writes it into the operation,
        `build` replaces it with the documentation)."""
        key = f"op{len(DECLARED)}"
        DECLARED[key] = self
        return {DOC_KEY: key}


# every declaration made by a route module, by the key its operation carries (filled at import)
DECLARED: dict[str, Operation] = {}


def errors(*statuses: int, style: Shape = "openai") -> dict[int, Sequence[Shape]]:
    return {s: (style,) for s in statuses}


def merge(*tables: dict[int, Sequence[Shape]]) -> dict[int, Sequence[Shape]]:
    """Several error tables: a status two of them name is answered in either shape."""
    out: dict[int, list[Shape]] = {}
    for table in tables:
        for status, styles in table.items():
            out.setdefault(status, [])
            out[status] += [s for s in styles if s not in out[status]]
    return dict(out)


# what every route may answer, whoever answers it: the API-key check, the request-id layer, draining
COMMON = errors(401, 500, 503)
# a route that reads a JSON body: the body limit, JSON and validation errors
BODY = merge(COMMON, errors(400, 413, 422))
# a route that queues a generation
GENERATE = merge(BODY, errors(429))
# a route that queues a generation for the `model` it names (an unknown one: 404 under --strict-model-names)
NAMED = merge(GENERATE, errors(404))


def declarations(routers: Iterable[APIRouter]) -> dict[tuple[str, str], Operation]:
    """The declared operations of `routers`, by (method, path)."""
    found: dict[tuple[str, str], Operation] = {}
    for route in (r for router in routers for r in router.routes):
        if isinstance(route, APIRoute) and route.openapi_extra and DOC_KEY in route.openapi_extra:
            op = DECLARED[route.openapi_extra[DOC_KEY]]
            found.update({(m, route.path): op for m in route.methods or ()})
    return found


def relayed(op: Operation, more: dict[int, Sequence[Shape]], note: str) -> JSONObject:
    """The `openapi_extra` of a route relaying `op` to a copy (the endpoint router): the copy's
    request and answers, and the router's own refusals (`more`)."""
    description = f"{op.description} {note}".strip()
    return replace(op, errors=merge(op.errors, more), description=description).extra()


def operation(summary: str, **kw: Any) -> JSONObject:
    """A route's `openapi_extra`: `@router.post(path, openapi_extra=operation("...", body=[Model]))`."""
    return Operation(summary, **kw).extra()


class Registry:
    """The JSON schemas of the models the document names, with their component references."""

    def __init__(self, models: Iterable[type[BaseModel]]) -> None:
        unique = list(dict.fromkeys(models))
        refs, defs = models_json_schema([(m, "validation") for m in unique], ref_template=REF)
        self.refs = {model: refs[(model, "validation")] for model in unique}
        self.schemas: JSONObject = defs.get("$defs", {})

    def ref(self, model: type[BaseModel]) -> JSONObject:
        return dict(self.refs[model])


def _model(shape: Shape) -> type[BaseModel] | None:
    return ERROR_MODELS.get(shape) if isinstance(shape, str) else shape


def _error_response(status: int, shapes: Sequence[Shape], reg: Registry) -> JSONObject:
    refs: list[JSONValue] = [reg.ref(m) for m in map(_model, shapes) if m is not None]
    out: JSONObject = {"description": DESCRIPTIONS.get(status, "Error")}
    if refs:
        schema: JSONValue = refs[0] if len(refs) == 1 else {"anyOf": refs}
        out["content"] = {"application/json": {"schema": schema}}
    if status in RETRY_STATUSES and any(isinstance(s, str) for s in shapes):  # not /health's own body
        out["headers"] = {
            "Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "string"}}
        }
    if status == 401:
        out["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
    return out


def _successes(op: Operation) -> list[type[BaseModel]]:
    if op.success is None:
        return []
    return [op.success] if isinstance(op.success, type) else list(op.success)


def _success(op: Operation, reg: Registry) -> JSONObject:
    content: JSONObject = {}
    refs: list[JSONValue] = [reg.ref(m) for m in _successes(op)]
    if refs:
        content["application/json"] = {"schema": refs[0] if len(refs) == 1 else {"anyOf": refs}}
    if op.stream:
        content[SSE] = {"schema": SSE_EVENT}
    for media, text in op.media.items():
        content[media] = {"schema": {"type": "string", "description": text}}
    out: JSONObject = {"description": "Success"}
    if content:
        out["content"] = content
    return out


def _request_body(op: Operation, reg: Registry) -> JSONObject:
    refs: list[JSONValue] = [reg.ref(m) for m in op.body]
    schema: JSONValue = refs[0] if len(refs) == 1 else {"oneOf": refs}
    media = (*(("application/json",) if op.json_body else ()), *op.body_media)
    return {"required": True, "content": {m: {"schema": schema} for m in media}}


def fill(operation_doc: JSONObject, op: Operation, reg: Registry) -> None:
    """Replace FastAPI's placeholders (a 200 of `{}`, a 422 it never sends) with the declared ones."""
    operation_doc.pop(DOC_KEY, None)
    operation_doc["summary"] = op.summary
    if op.description:
        operation_doc["description"] = op.description
    if op.body:
        operation_doc["requestBody"] = _request_body(op, reg)
    if op.params:
        declared = operation_doc.get("parameters")
        operation_doc["parameters"] = [*(declared if isinstance(declared, list) else ()), *op.params]
    responses: JSONObject = {str(op.status): _success(op, reg)}
    for status, shapes in sorted(op.errors.items()):
        responses[str(status)] = _error_response(status, shapes, reg)
    operation_doc["responses"] = responses


def _models(ops: Iterable[Operation]) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = list(ERROR_MODELS.values())
    for op in ops:
        found += list(op.body) + _successes(op)
        found += [m for shapes in op.errors.values() for m in map(_model, shapes) if m is not None]
    return found


def build(
    app: FastAPI, description: str = "", secured: bool = False, open_paths: Iterable[str] = ()
) -> JSONObject:
    """The document of `app`; `secured`: API keys are on (every path but `open_paths` needs one)."""
    doc = get_openapi(title=app.title, version=app.version, description=description, routes=app.routes)
    operations = [o for item in doc.get("paths", {}).values() for o in item.values()]
    reg = Registry(_models(DECLARED[o[DOC_KEY]] for o in operations if DOC_KEY in o))
    for path, item in doc.get("paths", {}).items():
        for operation_doc in item.values():
            if DOC_KEY in operation_doc:
                fill(operation_doc, DECLARED[operation_doc[DOC_KEY]], reg)
            if secured and path in open_paths:
                operation_doc["security"] = []
    components = doc.setdefault("components", {})
    components["schemas"] = reg.schemas
    if secured:
        components["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
        }
        doc["security"] = [{"bearer": []}, {"apiKey": []}]
    return doc


SWAGGER_DIR = "swagger_ui"
STATIC_PATH = DOC_ASSETS.rstrip("/")  # open without an API key, as /docs and /openapi.json


def swagger_assets() -> str:
    """The directory of the vendored swagger-ui-dist files (package data)."""
    return str(resources.files("llmhost.web").joinpath(SWAGGER_DIR))


def install(
    app: FastAPI, description: str = "", secured: bool = False, open_paths: Iterable[str] = ()
) -> None:
    """/openapi.json from the declarations; /docs from the package's Swagger UI (works offline)."""
    cache: JSONObject = {}

    def openapi() -> JSONObject:
        if not cache:
            cache.update(build(app, description, secured, open_paths))
        return cache

    app.openapi = openapi  # type: ignore[method-assign]
    app.mount(STATIC_PATH, StaticFiles(directory=swagger_assets()), name="swagger-ui")
    app.add_api_route("/docs", _docs_page(app.title), methods=["GET"], include_in_schema=False)


def _docs_page(title: str) -> Callable[[Request], Response]:
    def page(_: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{STATIC_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_PATH}/favicon-32x32.png",
        )

    return page
