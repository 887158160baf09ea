"""The generic tool format, for chat templates that show a model no tools (SmolLM2's, Gemma 3's,
Phi-3.5's): the tools are described in a system message, which the model's own template renders as
any system message, and a call is a JSON object `{"name": ..., "arguments": {...}}` (several: an array
of them), forced by the usual constraint under `tool_choice` "required" or a named function, read back
by `tools.GenericParser` under "auto".

The conversation's tool turns are put in words such a template takes: an assistant's calls as the JSON
it would write, a tool's result as a user turn (templates that insist on alternating user and assistant
turns, Gemma 3's, refuse a `tool` role), consecutive ones merged into one.
"""

from __future__ import annotations

import json

from llmhost.server.serving.chat_template import ChatTemplate, TemplateMessage
from llmhost.shared.jsontypes import JSONObject, JSONValue

# what a template reads when it shows a model its tools (Hugging Face's convention)
TOOLS_VARIABLE = "tools"
CALL_SHAPE = '{"name": "<tool name>", "arguments": {<its arguments>}}'


def renders_tools(template: ChatTemplate) -> bool:
    """Whether the template shows the model the request's tools itself."""
    return template.uses(TOOLS_VARIABLE)


def describe(tools: list[JSONObject]) -> str:
    """The system message text telling the model its tools and how to call one."""
    lines = ["You can call these tools:"]
    for tool in tools:
        function = tool.get("function")
        if not isinstance(function, dict):
            continue
        lines.append(f"\n- {function.get('name')}: {function.get('description') or '(no description)'}")
        lines.append(f"  parameters (JSON schema): {json.dumps(function.get('parameters', {}))}")
    lines.append(
        f"\nTo call a tool, answer with only a JSON object {CALL_SHAPE} (several calls: a JSON array "
        "of such objects) and nothing else. Otherwise answer in plain text."
    )
    return "\n".join(lines)


def _call_text(message: TemplateMessage) -> str:
    """An assistant turn's calls as the JSON the model is told to write (after any text it wrote)."""
    calls: list[JSONValue] = [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message.get("tool_calls", [])
    ]
    written = json.dumps(calls[0] if len(calls) == 1 else calls)
    return f"{message['content']}\n{written}" if message["content"] else written


def _result_text(message: TemplateMessage, names: dict[str, str]) -> str:
    name = message.get("name") or names.get(message.get("tool_call_id", ""), "")
    label = f"Result of the tool call {name}" if name else "Result of the tool call"
    return f"{label}:\n{message['content']}"


def _join(out: list[TemplateMessage], text: str) -> None:
    """A user turn's text, joined to the user turn before it (results and the question after them are
    one turn: a template may insist on alternating turns)."""
    if out and out[-1]["role"] == "user":
        out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{text}"}
    else:
        out.append({"role": "user", "content": text})


def conversation(messages: list[TemplateMessage], tools: list[JSONObject] | None) -> list[TemplateMessage]:
    """The messages as a template without tools takes them: the tools' description merged into the
    first system message (or one put first), calls and results as text; other turns as they are."""
    out: list[TemplateMessage] = []
    names: dict[str, str] = {}  # a call's id -> its tool's name, for results that name no tool
    after_result = False  # the last turn holds a tool's result
    for m in messages:
        for c in m.get("tool_calls", []):
            names[c["id"]] = c["function"]["name"]
        if m["role"] == "tool":
            _join(out, _result_text(m, names))
            after_result = True
            continue
        if m["role"] == "user" and after_result:
            _join(out, m["content"])
        elif m.get("tool_calls"):
            turn: TemplateMessage = {"role": m["role"], "content": _call_text(m)}
            for key in ("reasoning_content", "thinking"):  # a thought, where the template reads one
                if key in m:
                    turn[key] = m[key]
            out.append(turn)
        else:
            out.append(m)
        after_result = False
    if tools:
        described = describe(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{described}"}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out
