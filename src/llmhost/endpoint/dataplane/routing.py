"""The endpoint's routing decisions, shared by the single-host router and the Ray Serve ingress so that
both answer alike: which component a request is for, which headers travel, the error bodies, and how a
stream cut mid-way ends.

`/invocations` and the TGI routes name the component in `X-Amzn-SageMaker-Inference-Component` (optional
with one component), or an adapter (an adapter component, or a component's adapter): the request goes to
its base's copies with the adapter named in `X-Amzn-SageMaker-Adapter-Identifier`, as SageMaker tells
its containers; OpenAI, Anthropic Messages, Responses and tokenizer routes name it in the body's
`model` (vLLM's /tokenize and /detokenize carry one), else the header, as do Ollama's /api/chat,
/api/generate, /api/embed and /api/show (`name:latest` names the component `name`); GET /tokenizer_info in
the query's `model`, else the header.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from llmhost.endpoint.apidoc import relay_doc
from llmhost.endpoint.bodies import ModelEntry
from llmhost.server.serving.apis.anthropic_events import error_event as anthropic_error_event
from llmhost.server.serving.model_names import UNNAMED as UNNAMED_MODELS
from llmhost.web import eventstream
from llmhost.web.errors import APIError, error_body, retry_after
from llmhost.web.formats import AnthropicRoute, OllamaRoute, is_anthropic, is_ollama
from llmhost.web.responses import ErrorResponse

COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"
COPY_HEADER = "X-Llmhost-Copy"
# which adapter applies, as SageMaker names an adapter inference component to the container
ADAPTER_HEADER = "X-Amzn-SageMaker-Adapter-Identifier"
HOP_BY_HOP = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "accept-encoding",
    # credentials stop at the router: copies never see a client's key
    "authorization",
    "x-api-key",
}
DROP_RESPONSE = {"content-length", "connection", "keep-alive", "transfer-encoding", "date", "server"}
# routes whose component comes from the header, and those whose component comes from the body's model
HEADER_ROUTES = ("/invocations", "/", "/generate", "/generate_stream")
MODEL_ROUTES = (
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/embeddings",
    "/embed",
    "/v1/rerank",
    "/v1/reranking",
    "/rerank",
    "/reranking",
    "/v2/rerank",
    "/v1/score",
    "/score",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/tokenize",
    "/detokenize",
    "/api/chat",
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
    "/api/show",
)
# multipart form routes (OpenAI's audio): the component comes from the form's `model` field
FORM_ROUTES = ("/v1/audio/transcriptions", "/v1/audio/translations")
NDJSON = "application/x-ndjson"  # Ollama's streams: one JSON object a line
# GET routes whose component is named in the query (`?model=`)
QUERY_ROUTES = ("/tokenizer_info",)


class Routable(Protocol):
    name: str
    removing: bool

    @property
    def adapters(self) -> frozenset[str]: ...  # the LoRA adapters its copies load: requests may name one


C = TypeVar("C", bound=Routable)
C_co = TypeVar("C_co", bound=Routable, covariant=True)
C_contra = TypeVar("C_contra", bound=Routable, contravariant=True)


class Components(Protocol[C_co]):
    @property
    def components(self) -> Mapping[str, C_co]: ...


class Forwarder(Protocol[C_contra]):
    """Sends a request to one of a component's copies: the single-host router's Proxy, or the Ray
    ingress's relay over deployment handles."""

    async def forward(self, request: Request, comp: C_contra, body: bytes) -> Response: ...


class Counted(Protocol):
    requests: Counter[int]  # answers by HTTP status

    def enter(self) -> None: ...

    def leave(self) -> None: ...


async def counted(comp: Counted, forward: Callable[[], Awaitable[tuple[Response, bool]]]) -> Response:
    """The one accounting of a forwarded request, the router's and the Ray relay's: in the component's
    in-flight count until answered, or until the body it relays ends (`forward` says which), and its
    status counted."""
    comp.enter()
    release_later = False
    try:
        response, release_later = await forward()
        comp.requests[response.status_code] += 1
        return response
    finally:
        if not release_later:
            comp.leave()


class NotTaken:
    """The one retry rule of the router and the Ray relay. A request no copy took (nothing was done with
    it) is sent again, to a copy that may take it, until the component's wait is over; one a copy took
    and then failed is never sent again (it may have been processed): `taken_then_failed`."""

    def __init__(self, component: str, wait_s: float) -> None:
        self.component = component
        self.wait_s = wait_s
        self.deadline = time.monotonic() + wait_s
        self.last = ""  # why the last attempt was not taken

    def left_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def missed(self, why: str) -> None:
        self.last = why

    def given_up(self, what: str = "") -> Response:
        """The 503 once the wait is over; `what`: how no copy answered (" took the request")."""
        after = f"; last failure: {self.last}" if self.last else ""
        return error(
            503,
            f"no ready copy of inference component {self.component!r}{what} within {self.wait_s:g} s{after}",
            "service_unavailable",
        )


def taken_then_failed(component: str, copy: str, why: str, timed_out: bool) -> Response:
    """A copy took the request, then failed: never sent again (it may have been processed)."""
    message = (
        f"copy {copy} of inference component {component!r} failed after the request reached it "
        f"({why}); not retried, it may have been processed"
    )
    return error(504 if timed_out else 502, message, "upstream_error")


class Relay(StreamingResponse):
    """A streaming response that always runs `on_close`, even when the client left before the body."""

    def __init__(
        self, body: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]], **kw: Any
    ) -> None:
        super().__init__(body, **kw)
        self._on_close = on_close
        self._then: list[Callable[[], None]] = []

    def also_on_close(self, then: Callable[[], None]) -> None:
        """Run `then` after `on_close`."""
        self._then.append(then)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                await self._on_close()
            finally:
                for then in self._then:
                    then()


def error(
    status: int, message: str, type_: str = "invalid_request_error", field: str | None = None, **extra: Any
) -> Response:
    """The router's own refusal, in the error format its route declares (`relay_route`)."""
    headers = retry_after() if status in (429, 503) else None
    return ErrorResponse(APIError(status, message, type_, field=field, extra=extra, headers=headers))


def error_event(message: str, status: int = 502) -> bytes:
    return f"data: {json.dumps(error_body(status, message, 'upstream_error'))}\n\n".encode()


def known(registry: Components[Routable]) -> str:
    names = sorted(n for n, c in registry.components.items() if not c.removing)
    return ", ".join(names) or "(none)"


def _unknown(registry: Components[Routable], name: str, field: str) -> Response:
    return error(
        404,
        f"unknown inference component {name!r}; known components: {known(registry)}",
        "not_found_error",
        field=field,
    )


def _only(registry: Components[C]) -> C | None:
    live = [c for c in registry.components.values() if not c.removing]
    return live[0] if len(live) == 1 else None


def _named(registry: Components[C], model: str) -> C | None:
    """The component `model` names: itself, or the one whose copies load the adapter of that name."""
    comp = registry.components.get(model)
    if comp is None:
        comp = next((c for c in registry.components.values() if model in c.adapters), None)
    return comp


def by_header(registry: Components[C], headers: Mapping[str, str]) -> C | Response:
    name = headers.get(COMPONENT_HEADER)
    if name:
        comp = _named(registry, name)  # an adapter's: the base whose copies apply it (`header_adapter`)
        if comp is None or comp.removing:
            return _unknown(registry, name, COMPONENT_HEADER)
        return comp
    only = _only(registry)
    if only is not None:
        return only
    return error(
        400,
        f"several inference components are deployed; name one in the {COMPONENT_HEADER} "
        f"header: {known(registry)}",
        field=COMPONENT_HEADER,
    )


def header_adapter(registry: Components[C], headers: Mapping[str, str]) -> str | None:
    """The adapter the component header names (not a component): the base's copy applies it."""
    name = headers.get(COMPONENT_HEADER)
    if not name or name in registry.components:
        return None
    return name if _named(registry, name) is not None else None


def with_adapter(request: Request, adapter: str | None, base: str) -> Request:
    """The request as its copy gets it: for its own component (`base`), naming the adapter to apply."""
    if adapter is None:
        return request
    keys = (ADAPTER_HEADER.lower().encode(), COMPONENT_HEADER.lower().encode())
    headers = [(k, v) for k, v in request.scope["headers"] if k.lower() not in keys]
    headers += [(keys[0], adapter.encode()), (keys[1], base.encode())]
    return Request({**request.scope, "headers": headers}, request.receive)


def model_named(body: bytes, adapter: str | None) -> bytes:
    """A JSON body naming no model, naming the adapter the header names (OpenAI's and Ollama's routes
    read the adapter from `model`)."""
    if adapter is None:
        return body
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return body
    if not isinstance(data, dict) or (data.get("model") or "tgi") not in UNNAMED_MODELS:
        return body
    return json.dumps({**data, "model": adapter}).encode()


def by_model(registry: Components[C], body: bytes, headers: Mapping[str, str]) -> C | Response:
    """The body's `model` names the component; else the header; else the only component."""
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read: the copy says why
        data = None
    return by_model_name(registry, data.get("model") if isinstance(data, dict) else None, headers)


async def by_form(registry: Components[C], body: bytes, headers: Mapping[str, str]) -> C | Response:
    """A multipart form's `model` field names the component; else the header; else the only component
    (a body that is no form goes on to the copy, which says why)."""
    return by_model_name(registry, await form_field(body, headers, "model"), headers)


async def form_field(body: bytes, headers: Mapping[str, str], name: str) -> str | None:
    """The text field `name` of a multipart form body, None where there is none or no form."""

    async def whole() -> AsyncGenerator[bytes, None]:
        yield body

    content_type = headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        return None
    try:
        form = await MultiPartParser(Headers({"content-type": content_type}), whole()).parse()
    except MultiPartException:
        return None
    try:
        value = form.get(name)
        return value if isinstance(value, str) else None
    finally:
        await form.close()


def by_model_name(registry: Components[C], model: object, headers: Mapping[str, str]) -> C | Response:
    """The component a request's `model` names; else the header; else the only component."""
    if isinstance(model, str) and model and model not in UNNAMED_MODELS:
        # Ollama's clients name models `name:tag`, `latest` when no tag was given (/api/tags lists so)
        comp = _named(registry, model) or _named(registry, model.removesuffix(":latest"))
        if comp is not None and not comp.removing:
            return comp
        if not headers.get(COMPONENT_HEADER):
            return _unknown(registry, model, "model")
    return by_header(registry, headers)


def by_query(registry: Components[C], query: Mapping[str, str], headers: Mapping[str, str]) -> C | Response:
    """A GET's component: the query's `model`, else the header, else the only component."""
    model = query.get("model")
    if model:
        comp = _named(registry, model)
        if comp is None or comp.removing:
            return _unknown(registry, model, "model")
        return comp
    if not headers.get(COMPONENT_HEADER) and _only(registry) is None:
        return error(
            400,
            f"several inference components are deployed; name one in the query (?model=NAME) "
            f"or the {COMPONENT_HEADER} header: {known(registry)}",
            field="model",
        )
    return by_header(registry, headers)


def forwarded_headers(headers: Iterable[tuple[str, str]], rid: str) -> dict[str, str]:
    """What a copy gets of the client's headers: no hop-by-hop ones, no credentials, and the router's
    request id, so that the copy logs and echoes the same id."""
    out = {k: v for k, v in headers if k.lower() not in HOP_BY_HOP}
    out["x-request-id"] = rid or out.get("x-request-id", "")
    return out


def relayed_headers(headers: Iterable[tuple[str, str]], copy: str) -> dict[str, str]:
    out = {k: v for k, v in headers if k.lower() not in DROP_RESPONSE}
    out[COPY_HEADER] = copy
    return out


def stream_kind(content_type: str) -> tuple[bool, bool]:
    """(streamed, framed): SSE and AWS event streams pass through chunk by chunk; an event stream is
    framed (relayed in whole messages)."""
    framed = content_type.startswith(eventstream.MEDIA_TYPE)
    return framed or content_type.startswith(("text/event-stream", NDJSON)), framed


def responses_error_event(message: str) -> bytes:
    """The Responses API's stream `error` event."""
    body = {"type": "error", "code": "upstream_error", "message": message, "param": None}
    return f"event: error\ndata: {json.dumps(body)}\n\n".encode()


def tgi_error_event(message: str) -> bytes:
    """TGI's stream error (text-generation-inference writes `data:` without a space)."""
    return f"data:{json.dumps({'error': message, 'error_type': 'upstream'})}\n\n".encode()


def _cut_event(message: str, path: str) -> bytes:
    if is_anthropic(path):
        return anthropic_error_event(message).encode()
    if path == "/v1/responses" or path.startswith("/v1/responses/"):
        return responses_error_event(message)
    if path == "/generate_stream":
        return tgi_error_event(message)
    return error_event(message)


def stream_cut(message: str, framed: bool, tail: bytes, path: str = "") -> list[bytes]:
    """How a stream cut by a failing copy ends, in the stream's own format: a ModelStreamError in an
    event stream, else an SSE error event (after closing a partly sent event, `tail` being the last
    bytes sent) of the route's API (`path`): Anthropic's and the Responses API's named `error` events,
    TGI's error, else OpenAI's."""
    if framed:
        return [eventstream.model_stream_error(message, eventstream.STREAM_BROKEN)]
    if is_ollama(path):  # NDJSON: an `error` object on a line of its own
        line = json.dumps({"error": message}).encode() + b"\n"
        return ([b"\n"] if not tail.endswith(b"\n") else []) + [line]
    return ([b"\n\n"] if tail != b"\n\n" else []) + [_cut_event(message, path)]


def ping(accepting: bool, serving: Mapping[str, bool]) -> Response:
    """/ping: 200 once every component can serve (a ready copy, or none meant: scaled to zero)."""
    if not accepting:
        return error(503, "endpoint shutting down", "service_unavailable")
    waiting = [name for name, ok in serving.items() if not ok]
    if serving and not waiting:
        return Response(status_code=200)
    why = f"no ready copy of {', '.join(waiting)}" if serving else "no inference component"
    return error(503, f"endpoint not ready: {why}", "service_unavailable")


def model_entry(name: str, copies: int, ready: int) -> ModelEntry:
    return {
        "id": name,
        "object": "model",
        "owned_by": "llmhost",
        "created": 0,
        "copies": copies,
        "ready": ready,
    }


def adapter_entries(comp: Routable, copies: int, ready: int) -> list[ModelEntry]:
    """/v1/models' entries of a component's LoRA adapters, each with the component as its parent."""
    entries = [model_entry(name, copies, ready) for name in sorted(comp.adapters)]
    for entry in entries:
        entry["parent"] = comp.name
    return entries


def relay_route(path: str) -> type[APIRoute]:
    """The route class of the route relaying `path`, which declares the error format of the router's own
    refusals there: Anthropic's and Ollama's APIs in theirs, the others (TGI's too) in OpenAI's."""
    return AnthropicRoute if is_anthropic(path) else OllamaRoute if is_ollama(path) else APIRoute


def data_routes(registry: Components[C], proxy: Forwarder[C]) -> APIRouter:
    """The routes relayed to a component's copy, each picking the component its own way."""
    router = APIRouter()

    async def route_header(request: Request) -> Response:
        picked = by_header(registry, request.headers)
        if isinstance(picked, Response):
            return picked
        adapter = header_adapter(registry, request.headers)
        return await proxy.forward(with_adapter(request, adapter, picked.name), picked, await request.body())

    async def route_model(request: Request) -> Response:
        body = await request.body()
        picked = by_model(registry, body, request.headers)
        if isinstance(picked, Response):
            return picked
        adapter = header_adapter(registry, request.headers)
        return await proxy.forward(request, picked, model_named(body, adapter))

    async def route_form(request: Request) -> Response:
        body = await request.body()
        picked = await by_form(registry, body, request.headers)
        if isinstance(picked, Response):
            return picked
        return await proxy.forward(request, picked, body)

    async def route_query(request: Request) -> Response:
        picked = by_query(registry, request.query_params, request.headers)
        if isinstance(picked, Response):
            return picked
        return await proxy.forward(request, picked, b"")

    def add(path: str, method: str, route: Callable[[Request], Awaitable[Response]], how: str) -> None:
        router.add_api_route(
            path,
            route,
            methods=[method],
            openapi_extra=relay_doc(method, path, how),
            route_class_override=relay_route(path),
        )

    for path in HEADER_ROUTES:
        add(path, "POST", route_header, "header")
    add("/info", "GET", route_header, "header")
    # Batch Transform's: a copy's parameters; a JSON Lines /invocations body goes whole to one copy
    add("/execution-parameters", "GET", route_header, "header")
    for path in MODEL_ROUTES:
        add(path, "POST", route_model, "model")
    for path in FORM_ROUTES:
        add(path, "POST", route_form, "form")
    for path in QUERY_ROUTES:
        add(path, "GET", route_query, "query")
    return router
