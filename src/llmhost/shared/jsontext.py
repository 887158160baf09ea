"""JSON text as llmhost writes it, on the wire and into files: compact (no space after a separator) and
not ASCII-escaped (a token's text goes out as UTF-8, as OpenAI and llama-server send it), on one line.

One encoder, built once: `json.dumps` given options builds an encoder per call, and a stream writes a
line for every token."""

from __future__ import annotations

import json
from typing import Any

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def compact(data: Any) -> str:
    """`data` as one line of compact JSON."""
    return _ENCODER.encode(data)
