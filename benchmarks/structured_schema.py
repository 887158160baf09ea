"""The JSON schema of the structured-output benchmarks: nested objects, arrays and enums, with bounded
strings so a base model at temperature 1 finishes within the token budget."""

from __future__ import annotations

from typing import Any

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"type": "string", "enum": ["admin", "editor", "viewer"]},
        "active": {"type": "boolean"},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "country": {"type": "string", "enum": ["FR", "DE", "US", "JP"]},
            },
            "required": ["city", "country"],
            "additionalProperties": False,
        },
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["red", "green", "blue"]},
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["name", "age", "role", "active", "address", "tags"],
    "additionalProperties": False,
}

DOCUMENT: dict[str, Any] = {
    "name": "Ada Lovelace",
    "age": 36,
    "role": "admin",
    "active": True,
    "address": {"city": "London", "country": "FR"},
    "tags": ["red", "blue"],
}

PROMPT = "A user record as JSON, with name, age, role, active flag, address and tags:\n"
