"""Each API's error format, declared by the routes that speak it.

Every llmhost refusal is written once, in OpenAI's shape (`error_body`); a route declares the format its
API's clients read by its route class (`AnthropicRoute`, `OllamaRoute`, `TGIRoute`; a plain APIRoute is
OpenAI's), and the refusal is written in that format where it is answered: by the app's exception
handlers and an `ErrorResponse` a route returns (web/responses.py), and by the middleware that refuses
before the route runs (API key, body limit, draining, a crash), which finds the route the request is for.

- Anthropic (`/v1/messages...`): `{"type": "error", "error": {"type": ..., "message": ...}}`; a
  validation error is a 400, a refusal for load (429, 503) a 529 `overloaded_error`, Retry-After kept.
- Ollama (`/api/...`): `{"error": "..."}`, which its clients raise as ResponseError with the status; a
  validation error is a 400 (Ollama has no 422); `field`, `limit` and the request id stay beside `error`.
- TGI: `{"error": ..., "error_type": ...}` for the route's own refusals (its clients raise
  ValidationError, OverloadedError... from `error_type`); those made around it stay OpenAI's.
- TEI (text-embeddings-inference, `/embed`): the same shape with TEI's error types (`Validation`,
  `Empty`, `Overloaded`, `Unhealthy`, `Backend`); those made around it stay OpenAI's.
Streams are not touched here: their errors are events of each API's stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match, Router
from starlette.types import Scope

from llmhost.shared.jsontypes import JSONObject

Convert = Callable[[int, JSONObject], tuple[int, JSONObject]]


@dataclass(frozen=True, slots=True)
class ErrorFormat:
    name: str  # the OpenAPI document's name for it (web/apidoc.py's Style)
    # llmhost's status and OpenAI-shaped body -> this API's status and body
    convert: Convert
    # whether refusals made around the route (API key, body limit, draining, a crash, 404/405) take this
    # format too, or stay OpenAI's
    around_route: bool = True


def _openai(status: int, body: JSONObject) -> tuple[int, JSONObject]:
    return status, body


def _detail(body: Any) -> JSONObject:
    err = body.get("error") if isinstance(body, dict) else None
    return err if isinstance(err, dict) else {"message": str(err if err is not None else body)}


# -- Anthropic -------------------------------------------------------------------------------------------
ANTHROPIC_PREFIX = "/v1/messages"
# llmhost's status -> Anthropic's status and error type
ANTHROPIC_STATUS = {422: 400, 429: 529, 503: 529}
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_OPENAI_ONLY = ("message", "type", "param", "code")


def is_anthropic(path: str) -> bool:
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


def anthropic_error(status: int, body: Any) -> tuple[int, JSONObject]:
    """Anthropic's status and body for one of llmhost's error bodies (one already Anthropic's is kept)."""
    if isinstance(body, dict) and body.get("type") == "error":
        return status, body
    err = _detail(body)
    new_status = ANTHROPIC_STATUS.get(status, status)
    kind = ANTHROPIC_TYPES.get(new_status, "api_error" if new_status >= 500 else "invalid_request_error")
    out: JSONObject = {"type": kind, "message": str(err.get("message", ""))}
    out.update({k: v for k, v in err.items() if k not in _OPENAI_ONLY})
    return new_status, {"type": "error", "error": out}


# -- Ollama ----------------------------------------------------------------------------------------------
# the routes of Ollama's API, and only those (the console's API lives under /console/api/)
OLLAMA_PREFIX = "/api/"
_OLLAMA_KEPT = ("field", "limit", "request_id")


def is_ollama(path: str) -> bool:
    return path.startswith(OLLAMA_PREFIX)


def ollama_error(status: int, body: Any) -> tuple[int, JSONObject]:
    """Ollama's status and body for one of llmhost's error bodies (one already Ollama's is kept)."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return status, body
    err = _detail(body)
    out: JSONObject = {"error": str(err.get("message", ""))}
    out.update({k: err[k] for k in _OLLAMA_KEPT if err.get(k) is not None})
    return (400 if status == 422 else status), out


# -- TGI -------------------------------------------------------------------------------------------------
_TGI_LATER = ("field", "request_id")


def tgi_error(status: int, body: JSONObject) -> tuple[int, JSONObject]:
    """TGI's body for one of llmhost's error bodies: the message, the kind, then `field`, the facts that
    explain it (`limit`...) and the request id."""
    err = _detail(body)
    if status in (429, 503):
        kind = "overloaded"
    elif status >= 500:
        kind = "generation"
    else:
        kind = "validation"
    out: JSONObject = {"error": str(err.get("message", "")), "error_type": kind}
    if err.get("field") is not None:
        out["field"] = err["field"]
    out.update({k: v for k, v in err.items() if k not in (*_OPENAI_ONLY, *_TGI_LATER)})
    if err.get("request_id"):
        out["request_id"] = err["request_id"]
    return status, out


# -- TEI -------------------------------------------------------------------------------------------------
def tei_error(status: int, body: JSONObject) -> tuple[int, JSONObject]:
    """TEI's body for one of llmhost's error bodies: the message and TEI's error type (a refusal may name
    its own: `Empty`), then `field`, the facts that explain it and the request id."""
    err = _detail(body)
    if isinstance(err.get("error_type"), str):
        kind = str(err["error_type"])
    elif status == 429:
        kind = "Overloaded"
    elif status == 503:
        kind = "Unhealthy"
    else:
        kind = "Backend" if status >= 500 else "Validation"
    out: JSONObject = {"error": str(err.get("message", "")), "error_type": kind}
    if err.get("field") is not None:
        out["field"] = err["field"]
    out.update({k: v for k, v in err.items() if k not in (*_OPENAI_ONLY, *_TGI_LATER, "error_type")})
    if err.get("request_id"):
        out["request_id"] = err["request_id"]
    return status, out


OPENAI = ErrorFormat("openai", _openai)
TEI = ErrorFormat("tei", tei_error, around_route=False)
TGI = ErrorFormat("tgi", tgi_error, around_route=False)
ANTHROPIC = ErrorFormat("anthropic", anthropic_error)
OLLAMA = ErrorFormat("ollama", ollama_error)


# -- the routes' declarations ------------------------------------------------------------------------------
class TGIRoute(APIRoute):
    error_format: ClassVar[ErrorFormat] = TGI


class TEIRoute(APIRoute):
    error_format: ClassVar[ErrorFormat] = TEI


class AnthropicRoute(APIRoute):
    error_format: ClassVar[ErrorFormat] = ANTHROPIC


class OllamaRoute(APIRoute):
    error_format: ClassVar[ErrorFormat] = OLLAMA


def declared(route: BaseRoute) -> ErrorFormat:
    """The format `route` declares: OpenAI's unless its class names another."""
    found = getattr(type(route), "error_format", OPENAI)
    return found if isinstance(found, ErrorFormat) else OPENAI


def unrouted(path: str) -> ErrorFormat:
    """A request no route takes (a 404) is answered in the format of the API whose paths it is under."""
    return ANTHROPIC if is_anthropic(path) else OLLAMA if is_ollama(path) else OPENAI


def _flat(routes: Sequence[BaseRoute]) -> Iterator[BaseRoute]:
    """Every route, those of included routers too: FastAPI includes a router lazily (its routes stay in
    `original_router`; llmhost includes its routers without a prefix, their routes carry whole paths)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if isinstance(inner, Router):
            yield from _flat(inner.routes)
        else:
            yield route


def _route_for(scope: Scope, routes: Sequence[BaseRoute]) -> BaseRoute | None:
    """The route routing picked, or would pick: the first that matches, else one with the path (405)."""
    picked = scope.get("route")
    if isinstance(picked, BaseRoute):
        return picked
    partial = None
    for route in _flat(routes):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route
        if match is Match.PARTIAL and partial is None:
            partial = route
    return partial


def route_format(scope: Scope, routes: Sequence[BaseRoute] = ()) -> ErrorFormat:
    """The format of a refusal by the route `scope` is for (its own checks)."""
    route = _route_for(scope, routes)
    return declared(route) if route is not None else unrouted(str(scope.get("path", "")))


def around_format(scope: Scope, routes: Sequence[BaseRoute] = ()) -> ErrorFormat:
    """The format of a refusal made around the route `scope` is for: by middleware, or routing itself."""
    found = route_format(scope, routes)
    return found if found.around_route else OPENAI
