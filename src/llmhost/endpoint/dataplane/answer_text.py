"""The output text of a copy's answer, whatever API answered (OpenAI completions and chat, TGI and
SageMaker's /invocations, Anthropic Messages, Responses, Ollama), whole or streamed (SSE or NDJSON), and
whether a request asked for greedy decoding: what a shadow variant's answer is compared on.

None where the text cannot be read (an error, an AWS event stream, a shape none of these): such an answer
is not compared."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

NDJSON = "application/x-ndjson"
# TGI samples when a warper is set to anything but its neutral value
TGI_NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "typical_p": 1.0}


def _loads(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def greedy(body: bytes) -> bool:
    """The request asks for temperature 0 (its `temperature`, Ollama's `options.temperature`), or is a
    TGI request that does not sample (no do_sample, no warper): two variants answer it alike if their
    models do."""
    data = _loads(body) if body else None
    if not isinstance(data, dict):
        return False
    if "inputs" in data:  # TGI's and SageMaker's /invocations
        params = data.get("parameters") or {}
        if not isinstance(params, dict) or params.get("do_sample"):
            return False
        return all(params.get(k) in (None, neutral) for k, neutral in TGI_NEUTRAL.items())
    options = data.get("options")
    temperature = options.get("temperature") if isinstance(options, dict) else data.get("temperature")
    return temperature == 0 and not isinstance(temperature, bool)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _first_choice(obj: dict[str, Any]) -> dict[str, Any] | None:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _whole(obj: Any) -> str | None:
    """A whole (unstreamed) answer's text."""
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):  # TGI's /invocations: a list of one
        return _str(obj[0].get("generated_text"))
    if not isinstance(obj, dict) or "error" in obj:
        return None
    choice = _first_choice(obj)
    if choice is not None:  # OpenAI: a completion's text, a chat message's content
        message = choice.get("message")
        return _str(message.get("content")) if isinstance(message, dict) else _str(choice.get("text"))
    if "generated_text" in obj:
        return _str(obj["generated_text"])
    if obj.get("type") == "message" and isinstance(obj.get("content"), list):  # Anthropic Messages
        blocks = [b for b in obj["content"] if isinstance(b, dict) and b.get("type") == "text"]
        return "".join(str(b.get("text", "")) for b in blocks)
    if obj.get("object") == "response" and isinstance(obj.get("output"), list):  # Responses
        return "".join(
            part.get("text", "")
            for item in obj["output"]
            if isinstance(item, dict) and item.get("type") == "message"
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "output_text"
        )
    return _ollama(obj)


def _ollama(obj: dict[str, Any]) -> str | None:
    message = obj.get("message")
    if isinstance(message, dict):
        return _str(message.get("content"))
    return _str(obj.get("response"))


def _delta(obj: Any) -> str | None:
    """A stream event's piece of text ("" for an event carrying none); None: an error or an unknown
    shape."""
    if not isinstance(obj, dict) or "error" in obj:
        return None
    choice = _first_choice(obj)
    if choice is not None:  # OpenAI's chunks
        delta = choice.get("delta")
        if isinstance(delta, dict):
            return _str(delta.get("content")) or ""
        return _str(choice.get("text")) or ""
    if "choices" in obj:  # a chunk of usage only
        return ""
    token = obj.get("token")
    if isinstance(token, dict):  # TGI: special tokens are not in the generated text
        return "" if token.get("special") else _str(token.get("text")) or ""
    kind = obj.get("type")
    if isinstance(kind, str):  # Anthropic's and the Responses API's named events
        delta = obj.get("delta")
        if kind == "content_block_delta" and isinstance(delta, dict):
            return _str(delta.get("text")) or ""
        if kind == "response.output_text.delta":
            return _str(delta) or ""
        return None if kind in ("error", "response.failed") else ""
    return _ollama(obj)


def _sse_data(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload and payload != "[DONE]":
                yield payload


def answer_text(body: bytes, content_type: str) -> str | None:
    """The output text of an answer with this content type; None where it cannot be read."""
    text = body.decode(errors="replace")
    kind = content_type.split(";")[0].strip().lower()
    if kind == "text/event-stream":
        payloads: list[str] = list(_sse_data(text))
    elif kind == NDJSON:
        payloads = [line for line in text.splitlines() if line.strip()]
    elif kind == "application/json":
        return _whole(_loads(text))
    else:  # an AWS event stream, plain text: not read
        return None
    pieces = [_delta(_loads(p)) for p in payloads]
    if not pieces or any(p is None for p in pieces):
        return None
    return "".join(p for p in pieces if p is not None)
