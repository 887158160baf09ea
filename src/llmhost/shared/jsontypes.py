"""JSON whose shape is the client's, not llmhost's: a JSON schema, a tool call's arguments, chat template
variables, a custom handler's body. Everything whose shape llmhost decides has its own type."""

from __future__ import annotations

from pydantic import JsonValue

JSONValue = JsonValue  # str | int | float | bool | None | list[JSONValue] | dict[str, JSONValue]
JSONObject = dict[str, JsonValue]
