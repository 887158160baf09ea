"""OpenAI tool calls: what the template is told, how a call is forced, and how calls are read back.

`tool_choice` "required" or a named function: the output is constrained to JSON calls, so even a base
model returns a valid call. "auto": the model writes calls in its chat template's format, read back by
the parser of that format (Hermes/Qwen `<tool_call>`, Llama 3.x JSON, Mistral `[TOOL_CALLS]`, Granite
`<|tool_call|>`, gpt-oss's harmony `to=functions.NAME ... <|message|>{...}<|call|>`). A format's markers
are often control tokens, which generated text leaves out: the parser names them (`markers`) and the
request writes them out as text.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from llmhost.engine import Constraint
from llmhost.server.protocol.openai import ChatCompletionRequest, ChatMessage, NamedToolChoice, Tool
from llmhost.server.protocol.shapes import FunctionCall, ToolCall
from llmhost.server.serving.chat_template import TemplateMessage
from llmhost.server.serving.structured import schema_constraint
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError


@dataclass(slots=True, frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text

    def as_openai(self, index: int | None = None) -> ToolCall:
        """The call as a chat message holds it; a streamed delta's has the call's `index` too."""
        function: FunctionCall = {"name": self.name, "arguments": self.arguments}
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        if index is None:
            return {"id": call_id, "type": "function", "function": function}
        return {"index": index, "id": call_id, "type": "function", "function": function}


class ToolParser(Protocol):
    """Reads tool calls out of a model's text; what is not a call stays content."""

    # the format's marker strings: written into the output as text even where they are control tokens
    markers: tuple[str, ...]

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]: ...

    def hold_from(self, text: str) -> int:
        """Where a call may begin in `text` (so far): content before it can be streamed."""
        ...


def _hold_from(text: str, marker: str) -> int:
    """The marker's index, else where a partial marker ends the text, else len(text)."""
    found = text.find(marker)
    if found >= 0:
        return found
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return len(text) - k
    return len(text)


def _call(obj: Any) -> ParsedCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return ParsedCall(obj["name"], args if isinstance(args, str) else json.dumps(args))


def _calls(value: Any) -> list[ParsedCall] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_call(x) for x in items]
    return None if not calls or None in calls else [c for c in calls if c is not None]


_DECODER = json.JSONDecoder()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


class HermesParser:
    """Hermes / Qwen 2.5+: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one per call."""

    markers: tuple[str, ...] = ("<tool_call>", "</tool_call>")
    _block = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        start = text.find("<tool_call>")
        if start < 0:
            return text, []
        calls = [_call(_loads(m.group(1))) for m in self._block.finditer(text[start:])]
        if None in calls:
            return text, []
        return (text[:start].strip() or None), [c for c in calls if c is not None]

    def hold_from(self, text: str) -> int:
        return _hold_from(text, "<tool_call>")


class Llama3JsonParser:
    """Llama 3.x: `{"name": ..., "parameters": {...}}` (after `<|python_tag|>` or alone), `;`-separated."""

    markers: tuple[str, ...] = ("<|python_tag|>",)

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        body = text.split("<|python_tag|>", 1)[-1].strip()
        if not body.startswith("{"):
            return text, []
        calls = [_call(_loads(part)) for part in re.split(r"\s*;\s*(?=\{)", body)]
        if None in calls:
            return text, []
        return None, [c for c in calls if c is not None]

    def hold_from(self, text: str) -> int:
        # a call is the whole output: hold while it could still start like one
        head = text.lstrip()
        tag = "<|python_tag|>"
        return 0 if not head or head.startswith(("{", tag)) or tag.startswith(head) else len(text)


class ListParser:
    """A marker, then a JSON list of `{"name": ..., "arguments": {...}}`: Mistral's `[TOOL_CALLS]`,
    Granite 3.x's `<|tool_call|>`."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.markers: tuple[str, ...] = (marker,)

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        head, sep, tail = text.partition(self.marker)
        calls = _calls(_loads(tail.strip())) if sep else None
        if not calls:
            return text, []
        return (head.strip() or None), calls

    def hold_from(self, text: str) -> int:
        return _hold_from(text, self.marker)


class MistralParser(ListParser):
    """Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (Nemo, Small 3.1 and before);
    `[TOOL_CALLS]NAME[ARGS]{...}`, `[CALL_ID]ID` optionally before `[ARGS]`, once per call (Small 3.2,
    Devstral, Magistral)."""

    _named = re.compile(r"\[TOOL_CALLS\]([\w.\-]+)(?:\[CALL_ID\]\w+)?\[ARGS\]")

    def __init__(self) -> None:
        super().__init__("[TOOL_CALLS]")
        self.markers = ("[TOOL_CALLS]", "[CALL_ID]", "[ARGS]")

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        start = text.find(self.marker)
        if start < 0 or text[start + len(self.marker) :].lstrip().startswith("["):
            return super().parse(text)
        calls: list[ParsedCall] = []
        pos = start
        while pos < len(text):
            head = self._named.match(text, pos)
            try:
                args, pos = _DECODER.raw_decode(text, head.end()) if head else (None, pos)
            except ValueError:
                args = None
            if head is None or not isinstance(args, dict):
                return text, []
            calls.append(ParsedCall(head.group(1), json.dumps(args)))
            pos += len(text[pos:]) - len(text[pos:].lstrip())
        return (text[:start].strip() or None), calls


class HarmonyParser:
    """gpt-oss (OpenAI's harmony format): a call is a message addressed `to=functions.NAME` on the
    commentary channel, its body the arguments' JSON, ended by `<|call|>` (the end of generation, so
    often absent); the answer is the message on the final channel."""

    markers: tuple[str, ...] = (
        "<|start|>",
        "<|channel|>",
        "<|message|>",
        "<|constrain|>",
        "<|end|>",
        "<|call|>",
        "<|return|>",
    )
    _call = re.compile(
        r"to=functions\.([\w.\-]+)[^<]*(?:<\|channel\|>[^<]*)?(?:<\|constrain\|>[^<]*)?"
        r"<\|message\|>(.*?)(?:<\|call\|>|$)",
        re.DOTALL,
    )
    _final = re.compile(r"<\|channel\|>final<\|message\|>(.*?)(?:<\|return\|>|<\|end\|>|$)", re.DOTALL)

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        calls = [self._read(m) for m in self._call.finditer(text)]
        if not calls or None in calls:
            return text, []
        final = self._final.search(text)
        return (final.group(1).strip() or None) if final else None, [c for c in calls if c is not None]

    @staticmethod
    def _read(match: re.Match[str]) -> ParsedCall | None:
        args = _loads(match.group(2).strip())
        return ParsedCall(match.group(1), json.dumps(args)) if isinstance(args, dict) else None

    def hold_from(self, text: str) -> int:
        # everything after the first marker is structure (channels, addresses), not plain content
        return _hold_from(text, "<|")


class GenericParser:
    """The generic format (server/serving/generic_tools.py): a JSON call object `{"name": ...,
    "arguments": {...}}`, or an array of them, leading the output (in a ```json fence or not), every
    name one of the request's tools (else it is text: an answer about JSON, not a call). Text after the
    call is dropped, as the call is the answer (Llama 3's format reads it so too)."""

    markers: tuple[str, ...] = ()
    _fence = re.compile(r"```(?:json)?\s*")

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        head = text.lstrip()
        fenced = self._fence.match(head)
        if fenced:
            head = head[fenced.end() :]
        try:
            value, _ = _DECODER.raw_decode(head) if head.startswith(("{", "[")) else (None, 0)
        except ValueError:
            value = None
        calls = _calls(value) if value is not None else None
        if not calls or any(c.name not in self.names for c in calls):
            return text, []
        return None, calls

    def hold_from(self, text: str) -> int:
        # a call is the whole output: hold while it could still start like one
        head = text.lstrip()
        could = not head or head.startswith(("{", "[", "```")) or "```".startswith(head)
        return 0 if could else len(text)


PARSERS: dict[str, ToolParser] = {
    "hermes": HermesParser(),
    "llama3": Llama3JsonParser(),
    "mistral": MistralParser(),
    "granite": ListParser("<|tool_call|>"),
    "harmony": HarmonyParser(),
}


def parser_for(name: str, template_source: str) -> ToolParser:
    """`name` from --tool-parser; "auto" picks by the markers the chat template writes."""
    if name != "auto":
        return PARSERS[name]
    if "[TOOL_CALLS]" in template_source:
        return PARSERS["mistral"]
    if "<|tool_call|>" in template_source:
        return PARSERS["granite"]
    if "<|channel|>" in template_source and "<|call|>" in template_source:
        return PARSERS["harmony"]
    if "<|python_tag|>" in template_source or "ipython" in template_source:
        return PARSERS["llama3"]
    return PARSERS["hermes"]


# -- forcing calls -----------------------------------------------------------------------------------
def _arguments_schema(parameters: JSONObject) -> JSONObject:
    """The declared parameters and no others (OpenAI's strict function calling): a base model would
    otherwise keep inventing arguments until max_tokens. An object of no declared properties takes
    none here (nested objects are closed with the rest of the schema: schema_constraint)."""
    if parameters.get("type") == "object" and "additionalProperties" not in parameters:
        return {**parameters, "additionalProperties": False}
    return parameters


def _call_schema(tool: Tool) -> JSONObject:
    f = tool.function
    return {
        "type": "object",
        "properties": {"name": {"const": f.name}, "arguments": _arguments_schema(f.parameters)},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def forced_constraint(body: ChatCompletionRequest) -> Constraint | None:
    """For "required" or a named function: JSON calls (an array of them) the output must be."""
    tools, choice = body.tools or [], body.tool_choice
    if isinstance(choice, NamedToolChoice):
        named = [t for t in tools if t.function.name == choice.function.name]
        if not named:
            known = ", ".join(t.function.name for t in tools) or "(none)"
            raise APIError(
                400,
                f"tool_choice names {choice.function.name!r}, which is not in tools: {known}",
                field="tool_choice",
            )
        schema: JSONObject = {"type": "array", "items": _call_schema(named[0]), "minItems": 1, "maxItems": 1}
    elif choice == "required":
        if not tools:
            raise APIError(400, "tool_choice 'required' needs tools", field="tool_choice")
        # at most one call per tool (one in all without parallel calls): left open, a small model keeps
        # appending calls until max_tokens cuts the array
        limit = len(tools) if body.parallel_tool_calls else 1
        schema = {
            "type": "array",
            "items": {"anyOf": [_call_schema(t) for t in tools]},
            "minItems": 1,
            "maxItems": limit,
        }
    else:
        return None
    return schema_constraint(schema, "tool_choice")


def forced_calls(text: str) -> list[ParsedCall]:
    """The calls of an output produced under `forced_constraint`; of an array cut short (max_tokens),
    the calls that are complete (the cut one is dropped, never returned as content)."""
    whole = _calls(_loads(text))
    if whole is not None:
        return whole
    decoder, found, pos = json.JSONDecoder(), [], 1
    if not text.startswith("["):
        return []
    while pos < len(text):
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break
        call = _call(obj)
        if call is None:
            break
        found.append(call)
        if text[pos : pos + 1] != ",":
            break
        pos += 1
    return found


def mode(body: ChatCompletionRequest) -> str:
    """ "none" (no tools), "auto" (parse the model's own format) or "forced"."""
    if not body.tools or body.tool_choice == "none":
        if body.tool_choice not in (None, "none", "auto"):
            raise APIError(400, "tool_choice needs tools", field="tool_choice")
        return "none"
    return "auto" if body.tool_choice in (None, "auto") else "forced"


# -- what the template sees --------------------------------------------------------------------------
def template_message(m: ChatMessage) -> TemplateMessage:
    """A message as chat templates expect it (Hugging Face's convention: arguments as a mapping)."""
    out: TemplateMessage = {"role": m.role, "content": m.text()}
    if m.name is not None:
        out["name"] = m.name
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.reasoning_content is not None:  # Qwen3's name for it; gpt-oss's template reads `thinking`
        out["reasoning_content"] = out["thinking"] = m.reasoning_content
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": _loads(c.function.arguments) or {}},
            }
            for c in m.tool_calls
        ]
    return out


def template_tools(body: ChatCompletionRequest) -> list[JSONObject] | None:
    if mode(body) == "none":
        return None
    return [t.model_dump(exclude_none=True) for t in body.tools or []]


class StreamedChoice:
    """One streamed choice while tools are offered: content goes out as soon as it cannot be the start
    of a call; calls go out when the choice ends."""

    def __init__(self, tool_mode: str, parser: ToolParser | None) -> None:
        self.forced = tool_mode == "forced"
        self.parser = parser
        self.text = ""
        self.sent = 0

    def feed(self, piece: str) -> str:
        """Content that can be sent now."""
        self.text += piece
        if self.forced or self.parser is None:
            return ""
        cut = self.parser.hold_from(self.text)
        out = self.text[self.sent : cut] if cut > self.sent else ""
        self.sent = max(self.sent, cut)
        return out

    def finish(self) -> tuple[str, list[ParsedCall]]:
        """The content not sent yet, and the calls."""
        if self.forced:  # the output is call JSON: never content, cut or not
            return "", forced_calls(self.text)
        if self.parser is None:
            return self.text[self.sent :], []
        _, calls = self.parser.parse(self.text)
        end = self.parser.hold_from(self.text) if calls else len(self.text)
        return self.text[self.sent : end], calls
