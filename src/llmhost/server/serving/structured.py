"""Structured output requests: OpenAI `response_format`, llama-server `grammar` / `json_schema` and TGI
`grammar`, turned into the engine's Constraint."""

from __future__ import annotations

import json
from typing import Any

from llmhost.engine import Constraint, ConstraintKind
from llmhost.server.errors import APIError
from llmhost.server.protocol.openai import ResponseFormat, SamplingFields


def _dump(schema: Any) -> str:
    return json.dumps(schema, separators=(",", ":"))


def from_response_format(fmt: ResponseFormat) -> Constraint | None:
    if fmt.type == "text":
        if fmt.json_schema is not None:
            raise APIError(400, "response_format.json_schema needs type 'json_schema'",
                           field="response_format.json_schema")  # fmt: skip
        return None
    if fmt.type == "json_object":
        return Constraint(ConstraintKind.JSON_OBJECT, "", "response_format")
    if fmt.json_schema is None or not fmt.json_schema.schema_:
        raise APIError(400, "response_format of type json_schema needs json_schema.schema",
                       field="response_format.json_schema")  # fmt: skip
    # strict or not, the output follows the schema: a constraint engine has no cheaper "loose" mode
    return Constraint(ConstraintKind.JSON_SCHEMA, _dump(fmt.json_schema.schema_), "response_format")


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
        found.append(Constraint(ConstraintKind.JSON_SCHEMA, _dump(body.json_schema), "json_schema"))
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
        return Constraint(ConstraintKind.JSON_SCHEMA, _dump(schema), "grammar")
    if not isinstance(value, str):
        raise APIError(422, "grammar.value of type regex must be a string", field="grammar.value")
    return Constraint(ConstraintKind.REGEX, value, "grammar")
