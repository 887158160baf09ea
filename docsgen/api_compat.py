"""The API compatibility tables (docs/reference/api-compatibility.md): for each API llmhost speaks, each
request field the vendor's own client library sends, and each field llmhost's protocol model
(src/llmhost/server/protocol/) takes, with what llmhost does with it.

The fields come from the code on both sides, so the page cannot drift: a field added to a protocol model
appears as supported, one the vendor adds appears as refused (the protocol models forbid unknown fields:
a 400 naming it). Only what a field's presence cannot say is kept by hand, in NOTES: fields accepted
with no effect, or accepted at one value only; tests/docs/test_api_compat.py checks each note against
the model (the field exists; an "only" value is accepted, another refused)."""

from __future__ import annotations

import importlib
import json
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from docsgen.md import table

SUPPORTED = "supported"
EXTENSION = "extension"  # supported, and not in the vendor client's request type
NO_EFFECT = "no effect"  # accepted, changes nothing
ONLY = "one value"  # accepted at one value, any other refused
REFUSED = "refused"  # a 400 naming the field


@dataclass(frozen=True)
class Api:
    key: str
    title: str
    route: str
    model: str  # module:Class of the protocol model
    upstream: str  # module:Name of the vendor's request type (a TypedDict or a pydantic model)
    package: str  # the vendor's client library, as pip names it

    def protocol(self) -> type[BaseModel]:
        cls = _load(self.model)
        assert isinstance(cls, type) and issubclass(cls, BaseModel), self.model
        return cls

    def ours(self) -> dict[str, dict[str, Any]]:
        """The protocol model's fields by their JSON name, with their JSON schema."""
        schema = self.protocol().model_json_schema(by_alias=True, mode="validation")
        return dict(schema.get("properties", {}))

    def theirs(self) -> set[str]:
        return upstream_fields(_load(self.upstream))


def _load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def upstream_fields(kind: Any) -> set[str]:
    """A vendor request type's field names: a TypedDict's keys or a pydantic model's fields."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return {f.alias or name for name, f in kind.model_fields.items()}
    keys = getattr(kind, "__required_keys__", set()) | getattr(kind, "__optional_keys__", set())
    return set(keys) or set(typing.get_type_hints(kind))


APIS = (
    Api(
        "chat",
        "OpenAI chat completions",
        "POST /v1/chat/completions",
        "llmhost.server.protocol.openai:ChatCompletionRequest",
        "openai.types.chat.completion_create_params:CompletionCreateParamsStreaming",
        "openai",
    ),
    Api(
        "completions",
        "OpenAI completions",
        "POST /v1/completions",
        "llmhost.server.protocol.openai:CompletionRequest",
        "openai.types.completion_create_params:CompletionCreateParamsStreaming",
        "openai",
    ),
    Api(
        "responses",
        "OpenAI Responses",
        "POST /v1/responses",
        "llmhost.server.protocol.responses:ResponsesRequest",
        "openai.types.responses.response_create_params:ResponseCreateParamsStreaming",
        "openai",
    ),
    Api(
        "embeddings",
        "OpenAI embeddings",
        "POST /v1/embeddings",
        "llmhost.server.protocol.embeddings:EmbeddingRequest",
        "openai.types.embedding_create_params:EmbeddingCreateParams",
        "openai",
    ),
    Api(
        "messages",
        "Anthropic Messages",
        "POST /v1/messages",
        "llmhost.server.protocol.anthropic:MessagesRequest",
        "anthropic.types.message_create_params:MessageCreateParamsStreaming",
        "anthropic",
    ),
    Api(
        "tgi",
        "TGI parameters",
        "POST /generate, /generate_stream, /invocations (TGI body): its parameters",
        "llmhost.server.protocol.tgi:TGIParameters",
        "text_generation.types:Parameters",
        "text-generation",
    ),
)

# what a field's presence in a model cannot say: (status, why); every other field of a model is supported
NOTES: dict[str, dict[str, tuple[str, str]]] = {
    "chat": {
        "model": (
            SUPPORTED,
            "a single server answers whatever it names (and echoes it); an endpoint "
            "routes by it: a component's name",
        ),
        "user": (NO_EFFECT, "OpenAI's end-user id: nothing is logged or limited per user"),
        "service_tier": (NO_EFFECT, "one tier: the request runs as any other"),
    },
    "completions": {
        "model": (SUPPORTED, "as for chat: ignored by a single server, a component's name on an endpoint"),
        "user": (NO_EFFECT, "OpenAI's end-user id"),
        "service_tier": (NO_EFFECT, "one tier"),
        "suffix": (ONLY, '"" or null: llama.cpp models here do no fill-in-the-middle'),
    },
    "responses": {
        "model": (SUPPORTED, "as for chat: ignored by a single server, a component's name on an endpoint"),
        "user": (NO_EFFECT, "echoed in the response"),
        "metadata": (NO_EFFECT, "echoed in the response"),
        "store": (ONLY, "false or null: nothing is stored (true is a 400 saying so)"),
        "previous_response_id": (ONLY, "null: nothing is stored, send the whole conversation"),
        "truncation": (ONLY, '"disabled": a prompt over the limit is a 400, never cut'),
    },
    "embeddings": {
        "model": (SUPPORTED, "ignored by a single server, a component's name on an endpoint"),
        "user": (NO_EFFECT, "OpenAI's end-user id"),
        "dimensions": (
            ONLY,
            "the model's own width: llama.cpp does not shorten embeddings (other "
            "values: a 400 naming the width)",
        ),
    },
    "messages": {
        "model": (
            SUPPORTED,
            "required by Anthropic's schema; ignored by a single server, a component's name on an endpoint",
        ),
        "metadata": (NO_EFFECT, "Anthropic's user id: nothing is kept per user"),
        "cache_control": (NO_EFFECT, "the prefix cache reuses any shared prompt prefix by itself"),
    },
    "tgi": {
        "best_of": (ONLY, "1 or null"),
        "watermark": (ONLY, "false"),
        "adapter_id": (SUPPORTED, "a --lora adapter's name (null: the base model)"),
    },
}


def describe(prop: dict[str, Any]) -> str:
    """A field's accepted values, from its JSON schema: type, bounds, allowed values."""
    given = prop.get("anyOf") or prop.get("oneOf") or [prop]
    alts = [a for a in given if a.get("type") != "null"]
    if not alts:
        return "`null`"
    parts = [_one(a) for a in alts]
    return " or ".join(p for p in dict.fromkeys(parts) if p)


def _one(s: dict[str, Any]) -> str:
    if "const" in s:
        return f"`{_json(s['const'])}`"
    if "enum" in s:
        return " / ".join(f"`{_json(v)}`" for v in s["enum"])
    if "$ref" in s:
        return "object"
    kind = str(s.get("type", "any"))
    bounds = [
        f"{op} {s[key]}"
        for key, op in (
            ("minimum", "≥"),
            ("exclusiveMinimum", ">"),
            ("maximum", "≤"),
            ("exclusiveMaximum", "<"),
        )
        if key in s
    ]
    if "maxItems" in s:
        bounds.append(f"at most {s['maxItems']} items")
    if "maxLength" in s:
        bounds.append(f"at most {s['maxLength']} characters")
    return f"{kind} {', '.join(bounds)}".strip()


def _json(value: Any) -> str:
    return json.dumps(value)


def rows(api: Api) -> list[tuple[str, str, str, str]]:
    """(field, status, values, note) for each field on either side, ours first in the model's order."""
    ours, theirs, notes = api.ours(), api.theirs(), NOTES.get(api.key, {})
    out = []
    for name, prop in ours.items():
        status, note = notes.get(name, (SUPPORTED if name in theirs else EXTENSION, ""))
        out.append((f"`{name}`", status, describe(prop), note))
    out += [(f"`{name}`", REFUSED, "", "") for name in sorted(theirs - set(ours))]
    return out


def render() -> str:
    parts = []
    for api in APIS:
        parts.append(
            f"## {api.title}\n\n`{api.route}`; the vendor's fields from `{api.upstream}` "
            f"({api.package} {_version(api.package)})."
        )
        parts.append(table(("field", "llmhost", "values", "note"), rows(api)))
    return "\n\n".join(parts) + "\n"


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"
