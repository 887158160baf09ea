"""Structured output requests: OpenAI `response_format`, llama-server `grammar` / `json_schema` and TGI
`grammar`, turned into the engine's Constraint."""

from __future__ import annotations

import json
from typing import Any

from llmhost.engine import Constraint, ConstraintKind
from llmhost.server.protocol.openai import ResponseFormat, SamplingFields
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

# an object schema with any of these decides itself which undeclared properties it takes
_OPEN_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
# subschemas of other instances (items, property values...): closed on their own terms
_SUBSCHEMA = ("items", "additionalItems", "contains", "additionalProperties")
_SUBSCHEMA_LISTS = ("prefixItems",)
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
# subschemas that apply to the same instance as their parent: each may hold only part of its properties
_PARTS = ("if", "then", "else")
_PART_LISTS = ("allOf",)
_PART_MAPS = ("dependentSchemas",)
_ALTERNATIVES = ("anyOf", "oneOf")


def closed(schema: Any, part: bool = False) -> Any:
    """`schema` with undeclared properties closed: an object schema that declares `properties` and
    says nothing about other ones gets `additionalProperties: false`, as llama-server and vLLM do (a
    model left free to add properties, a base model above all, keeps inventing them until max_tokens).

    Left open: a `part` of its instance's schema (members of `allOf`, `if`/`then`/`else`,
    `dependentSchemas`; alternatives of `anyOf`/`oneOf` beside the parent's own `properties`), and a
    schema with such parts (they may add properties); `not` is left as it is."""
    if isinstance(schema, list):  # `items` as a tuple (draft 4)
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA:
        if key in out:
            out[key] = closed(out[key])
    for key in _PARTS:
        if key in out:
            out[key] = closed(out[key], part=True)
    for key, is_part in [
        *((k, False) for k in _SUBSCHEMA_LISTS),
        *((k, True) for k in _PART_LISTS),
        *((k, "properties" in out) for k in _ALTERNATIVES),
    ]:
        if isinstance(out.get(key), list):
            out[key] = [closed(s, part=is_part) for s in out[key]]
    for key in (*_SUBSCHEMA_MAPS, *_PART_MAPS):
        if isinstance(out.get(key), dict):
            out[key] = {name: closed(s, part=key in _PART_MAPS) for name, s in out[key].items()}
    has_parts = any(k in out for k in (*_PARTS, *_PART_LISTS, *_PART_MAPS, *_ALTERNATIVES))
    if "properties" in out and not part and not has_parts and not any(k in out for k in _OPEN_KEYWORDS):
        out["additionalProperties"] = False
    return out


# llama.cpp's JSON-schema grammar writes an integer in at most 16 digits ([1-9] [0-9]{0,15}): left
# unbounded, a small model spends its whole max_tokens on one number (measured: 4 of 6 Responses answers
# of a {name, age} schema, Gemma 3 270M, max_output_tokens 64, were cut inside `age`). The bound is the
# largest integer a double holds exactly (16 digits too): llguidance reads a schema's bounds as doubles,
# and 10**16 - 1 read so is 10**16, which let a forced call answer a 17-digit age
INTEGER_BOUND = 2**53 - 1
_DATA_KEYS = ("const", "enum", "default", "examples")  # instances, not schemas: left as they are


def _is_integer(schema: JSONObject) -> bool:
    kind = schema.get("type")
    return kind == "integer" or (isinstance(kind, list) and "integer" in kind)


def bounded(schema: Any) -> Any:
    """`schema` with each integer that sets no bound of its own bounded as llama.cpp bounds it
    (16 digits either way), so that the digits a model may write are finite."""
    if isinstance(schema, list):
        return [bounded(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v if k in _DATA_KEYS else bounded(v)) for k, v in schema.items()}
    if _is_integer(out):
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -INTEGER_BOUND
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = INTEGER_BOUND
    return out


def schema_constraint(schema: Any, field: str) -> Constraint:
    """The one way a JSON schema from a request becomes a constraint (undeclared properties closed,
    integers bounded)."""
    return Constraint(ConstraintKind.JSON_SCHEMA, _dump(bounded(closed(schema))), field)


def _dump(schema: Any) -> str:
    return json.dumps(schema, separators=(",", ":"))


def from_response_format(fmt: ResponseFormat) -> Constraint | None:
    if fmt.type == "text":
        if fmt.json_schema is not None:
            raise APIError(
                400,
                "response_format.json_schema needs type 'json_schema'",
                field="response_format.json_schema",
            )
        return None
    if fmt.type == "json_object":
        return Constraint(ConstraintKind.JSON_OBJECT, "", "response_format")
    if fmt.json_schema is None or not fmt.json_schema.schema_:
        raise APIError(
            400,
            "response_format of type json_schema needs json_schema.schema",
            field="response_format.json_schema",
        )
    # strict or not, the output follows the schema: a constraint engine has no cheaper "loose" mode
    return schema_constraint(fmt.json_schema.schema_, "response_format")


def openai_constraint(body: SamplingFields) -> Constraint | None:
    """The constraint of an OpenAI body; two ways of asking at once is a 400 naming both."""
    found: list[Constraint] = []
    if body.response_format is not None:
        c = from_response_format(body.response_format)
        if c is not None:
            found.append(c)
    if body.grammar is not None:
        found.append(Constraint(ConstraintKind.GBNF, body.grammar, "grammar"))
    if body.json_schema is not None:
        found.append(schema_constraint(body.json_schema, "json_schema"))
    if len(found) > 1:
        names = " and ".join(c.field for c in found)
        raise APIError(400, f"{names} both constrain the output: give one", field=found[1].field)
    return found[0] if found else None


def tgi_constraint(kind: str, value: Any) -> Constraint:
    """TGI's `grammar`: {"type": "json" | "regex", "value": schema or pattern}."""
    if kind == "json":
        try:
            schema = json.loads(value) if isinstance(value, str) else value
        except (ValueError, RecursionError) as exc:
            raise APIError(422, f"grammar.value is not a JSON schema: {exc}", field="grammar.value") from exc
        if not isinstance(schema, dict):
            raise APIError(
                422, "grammar.value of type json must be a JSON schema object", field="grammar.value"
            )
        return schema_constraint(schema, "grammar")
    if not isinstance(value, str):
        raise APIError(422, "grammar.value of type regex must be a string", field="grammar.value")
    return Constraint(ConstraintKind.REGEX, value, "grammar")
