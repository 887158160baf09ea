"""Ollama's model routes on an endpoint (the single-host router and the Ray ingress alike): /api/tags
lists its components, /api/ps those with a ready copy, with when an idle on-demand model unloads;
/api/version and `HEAD /` as a copy answers them. /api/chat, /api/generate, /api/embed, /api/show are
relayed to a copy by the body's `model` (llmhost.endpoint.dataplane.routing)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from starlette.responses import PlainTextResponse, Response

from llmhost.endpoint.dataplane.ollama_folder import ModelsFolder
from llmhost.endpoint.dataplane.routing import NDJSON, error
from llmhost.server.protocol import ollama as proto
from llmhost.server.protocol.outputs import json_response
from llmhost.server.routes.deps import json_body
from llmhost.server.serving.apis.ollama_models import (
    VERSION,
    adapter_entry,
    model_entry,
    running_entry,
    tagged,
)
from llmhost.settings.serve import SERVE_SPEC
from llmhost.web.apidoc import COMMON, errors, operation
from llmhost.web.formats import OllamaRoute

ERRORS = errors(401, 500, style="ollama")
_UNKNOWN = proto.Details(
    parent_model="",
    format="gguf",
    family="unknown",
    families=["unknown"],
    parameter_size="unknown",
    quantization_level="unknown",
)


@dataclass(frozen=True, slots=True)
class Listed:
    """A component as Ollama's listings show it."""

    name: str
    gguf: Path | None  # its model file, where this process can read it
    loaded: bool  # a copy is ready
    expires_in_s: float | None  # an idle on-demand model unloads in this many seconds; None: never
    context_length: int
    parent: str | None = None  # a LoRA adapter's: the component whose copies apply it


def context_length(engine_options: dict[str, Any]) -> int:
    """A component's context: its `engine:` max_total_tokens, else serve's default."""
    value = engine_options.get("max_total_tokens") or SERVE_SPEC["max_total_tokens"].default
    return int(value)


def _entry(item: Listed) -> proto.ModelEntry:
    if item.gguf is not None and item.gguf.is_file():
        return model_entry(item.name, str(item.gguf))
    name = tagged(item.name)
    epoch = "1970-01-01T00:00:00Z"
    return proto.ModelEntry(name=name, model=name, modified_at=epoch, size=0, digest="", details=_UNKNOWN)


def _entries(items: list[Listed]) -> list[proto.ModelEntry]:
    """Each component, then each LoRA adapter with its base's details and the base as its parent."""
    bases = {i.name: _entry(i) for i in items if i.parent is None}
    return [
        bases[i.name] if i.parent is None else adapter_entry(i.name, str(i.gguf or ""), bases[i.parent])
        for i in items
    ]


def _tags(items: list[Listed]) -> proto.TagsResponse:
    return proto.TagsResponse(models=_entries(items))


def _ps(items: list[Listed]) -> proto.PsResponse:
    running = [
        running_entry(e, i.expires_in_s, i.context_length)
        for i, e in zip(items, _entries(items), strict=True)
        if i.loaded
    ]
    return proto.PsResponse(models=running)


def _not_here(what: str) -> Callable[[], Awaitable[Response]]:
    async def refuse() -> Response:
        return error(
            400,
            f"an llmhost endpoint's models are its components (its endpoint file, or the "
            f"folder of --models-dir): it does not {what} models through Ollama's API",
            field="model",
        )

    return refuse


def _model_routes(router: APIRouter, folder: ModelsFolder | None) -> None:
    """/api/pull, /api/delete and /api/copy: on the models_dir `folder`, else a 400."""
    add = router.add_api_route
    pull_doc = operation(
        "Ollama pull: an s3:// model into the models_dir",
        body=[proto.ModelRequest],
        errors=errors(400, 401, 500, 502, style="ollama"),
        media={NDJSON: "With stream: true (the default): Ollama's progress objects"},
    )
    folder_errors = errors(400, 401, 404, 500, style="ollama")
    delete_doc = operation(
        "Ollama delete: a model of the models_dir", body=[proto.ModelRequest], errors=folder_errors
    )
    copy_doc = operation(
        "Ollama copy: a model of the models_dir", body=[proto.CopyRequest], errors=folder_errors
    )
    if folder is None:
        add("/api/pull", _not_here("pull"), methods=["POST"], openapi_extra=pull_doc)
        add("/api/delete", _not_here("delete"), methods=["DELETE"], openapi_extra=delete_doc)
        add("/api/copy", _not_here("copy"), methods=["POST"], openapi_extra=copy_doc)
    else:
        owned = folder

        async def delete(request: Request) -> Response:
            body = proto.ModelRequest.model_validate(await json_body(request))
            return await owned.delete(body.model_name())

        async def copy(request: Request) -> Response:
            body = proto.CopyRequest.model_validate(await json_body(request))
            return await owned.copy(body.source, body.destination)

        async def pull(request: Request) -> Response:
            body = proto.ModelRequest.model_validate(await json_body(request))
            return await owned.pull(body.model_name(), body.stream)

        add("/api/pull", pull, methods=["POST"], openapi_extra=pull_doc)
        add("/api/delete", delete, methods=["DELETE"], openapi_extra=delete_doc)
        add("/api/copy", copy, methods=["POST"], openapi_extra=copy_doc)


def ollama_routes(listed: Callable[[], list[Listed]], folder: ModelsFolder | None = None) -> APIRouter:
    """`listed`: the endpoint's components now; `folder`: its models_dir, where /api/copy and
    /api/delete act (elsewhere they are a 400)."""
    router = APIRouter(route_class=OllamaRoute)  # refusals in Ollama's shape

    @router.get(
        "/api/tags",
        openapi_extra=operation(
            "Ollama models: the endpoint's components", success=proto.TagsResponse, errors=ERRORS
        ),
    )
    async def tags() -> Response:
        return json_response(await asyncio.to_thread(_tags, listed()))

    @router.get(
        "/api/ps",
        openapi_extra=operation(
            "Ollama loaded models: components with a ready copy", success=proto.PsResponse, errors=ERRORS
        ),
    )
    async def ps() -> Response:
        return json_response(await asyncio.to_thread(_ps, listed()))

    @router.get(
        "/api/version",
        openapi_extra=operation("Ollama API version", success=proto.VersionResponse, errors=ERRORS),
    )
    async def version() -> Response:
        return json_response(proto.VersionResponse(version=VERSION))

    _model_routes(router, folder)

    # outside /api/: its refusals (a missing key) are in llmhost's usual shape
    alive_doc: dict[str, Any] = {"errors": COMMON, "media": {"text/plain": "Ollama is running"}}

    async def alive(_: Request) -> Response:
        return PlainTextResponse("Ollama is running")

    for method, summary in (("GET", "Ollama liveness"), ("HEAD", "Ollama liveness (HEAD)")):
        router.add_api_route(
            "/",
            alive,
            methods=[method],
            route_class_override=APIRoute,
            openapi_extra=operation(summary, **alive_doc),
        )
    return router
