"""The endpoint router's OpenAPI document: each relayed route documents what the copy takes and answers
(the replica's own declaration, one source) plus the router's refusals; the router's probes, model list
and admin API their own bodies."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from llmhost.server.routes.apis import CLIENT_APIS
from llmhost.web.apidoc import COMMON, Shape, declarations, errors, merge, operation, relayed
from llmhost.web.formats import is_anthropic, is_ollama

REPLICA = declarations(m.router for m in CLIENT_APIS)
# no such component (404), several and none named (400), no ready copy in time (503), the copy failed
# after the request reached it (502) or did not answer in time (504)
ROUTER = merge(errors(400, 404, 502, 504), COMMON)
ANTHROPIC = errors(400, 401, 404, 500, 502, 504, 529, style="anthropic")
OLLAMA = errors(400, 401, 404, 500, 502, 503, 504, style="ollama")
# the runtime's shapes: the router's refusals as ValidationError / ServiceUnavailable, a copy's failure
# as ModelError
RUNTIME = merge(errors(400, 424, 503, style="sagemaker"), COMMON)
NOTES = {
    "header": (
        "The endpoint router relays it to a copy of the component named in the "
        "X-Amzn-SageMaker-Inference-Component header (optional with one component)."
    ),
    "model": (
        "The endpoint router relays it to a copy of the component the body's `model` names (else the "
        "X-Amzn-SageMaker-Inference-Component header, else the only component)."
    ),
    "form": (
        "The endpoint router relays it to a copy of the component the form's `model` field names (else "
        "the X-Amzn-SageMaker-Inference-Component header, else the only component)."
    ),
    "query": (
        "The endpoint router relays it to a copy of the component `?model=` names (else the header, "
        "else the only component)."
    ),
}


@cache  # declared once, however many apps are built
def relay_doc(method: str, path: str, how: str) -> dict[str, Any]:
    """`openapi_extra` of the router's relaying route for `path`."""
    more: dict[int, Sequence[Shape]]
    if path.startswith("/endpoints/"):
        more = RUNTIME
    elif is_anthropic(path):
        more = ANTHROPIC
    elif is_ollama(path):
        more = OLLAMA
    else:
        more = ROUTER
    return relayed(REPLICA[(method, path)], more, NOTES[how])


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ComponentHealth(Open):
    copies: int
    ready: int


class RouterHealth(Open):
    """200 while the endpoint takes requests and every component can serve, else 503 (same body)."""

    status: str
    phase: str
    components: dict[str, ComponentHealth]


class RouterModel(Open):
    id: str
    object: str
    owned_by: str
    copies: int
    ready: int
    parent: str | None = None  # a LoRA adapter's component (its copies' counts are the component's)


class RouterModels(Open):
    object: str
    data: list[RouterModel]


class ComponentStatus(Open):
    name: str
    copies: int
    ready: int


class EndpointStatus(Open):
    """The endpoint and each component's copies (`llmhost endpoint status` prints it)."""

    name: str
    components: list[ComponentStatus]


class Scaled(Open):
    """The component once scaled (`wait: true`)."""

    copies: int
    ready: int


class Accepted(Open):
    """The scaling under way (`wait: false`): `{"accepted": true}` on a single host; on Ray the
    component, its target `copies` and the copies `ready` so far."""

    accepted: bool = True
    component: str | None = None
    copies: int | None = None
    ready: int | None = None


class Added(Open):
    added: list[str]


class Removed(Open):
    removed: str


class Unloaded(Open):
    """The on-demand model unloaded (`unloaded`: its name, null when it was not loaded) and its state."""

    unloaded: str | None
    state: str


class Rescanned(Open):
    """The models_dir scanned again: models added, removed, and those whose settings changed."""

    added: list[str]
    removed: list[str]
    changed: list[str]


class Stopping(Open):
    """The endpoint stopping (its name)."""

    stopping: str


DESCRIPTION = (
    "An endpoint of inference components: each request is relayed to a copy of the component it names, "
    "and answered as that copy answers (the operations below are the copies', with the router's own "
    "refusals); the admin API (/admin, local clients only) scales, adds and removes components."
)
# the router's own operations
PING = operation(
    "Endpoint health check: 200 (no body) once every component can serve, else 503", errors=errors(500, 503)
)
HEALTH = operation(
    "Endpoint health: each component's copies",
    success=RouterHealth,
    errors={500: ("openai",), 503: (RouterHealth,)},
)
MODELS = operation(
    "The endpoint's components (`id`: the name to put in `model`)", success=RouterModels, errors=COMMON
)
METRICS = operation(
    "Prometheus metrics of the router and its copies",
    media={"text/plain": "Prometheus text exposition format 0.0.4"},
    errors=errors(401, 500),
)
# the admin API: local clients only (403), a Ray endpoint's fixed components (501), Ray Serve failing (502)
ADMIN = merge(COMMON, errors(403, 501, 502))
