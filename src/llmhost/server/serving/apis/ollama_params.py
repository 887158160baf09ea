"""An Ollama request in llmhost's terms: `options` as sampling parameters and limits, `format` as a
constraint, messages (their images at media markers) and tools as the chat path's, and the capability
checks (`think`, `tools`)."""

from __future__ import annotations

import json
from typing import Any

from llmhost.engine import Constraint, ConstraintKind, SamplingParams
from llmhost.engine.media import MEDIA_MARKER
from llmhost.server.protocol import ollama as proto
from llmhost.server.protocol.openai import ChatCompletionRequest, ChatMessage, FunctionCall, FunctionDef, Tool
from llmhost.server.protocol.openai import ToolCall as OpenAIToolCall
from llmhost.server.serving.chat_template import ChatTemplate
from llmhost.server.serving.context import build_params
from llmhost.server.serving.generic_tools import renders_tools
from llmhost.server.serving.media import ChatMedia, base64_media
from llmhost.server.serving.reasoning import syntax_for
from llmhost.server.serving.structured import schema_constraint
from llmhost.server.serving.thinking import ThinkingAsk
from llmhost.web.errors import APIError

# Ollama's names -> the engine's
_RENAMED = {"repeat_penalty": "repetition_penalty", "repeat_last_n": "penalty_last_n"}
_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "repeat_last_n",
)


def check_options(raw: Any) -> None:
    """A load-time option is a 400 saying which serve setting fixes it (checked before validation,
    whose message would only say "extra inputs are not permitted")."""
    options = raw.get("options") if isinstance(raw, dict) else None
    if not isinstance(options, dict):
        return
    for name, why in proto.LOAD_OPTIONS.items():
        if options.get(name) is not None:
            raise APIError(
                400,
                f"option {name!r} is set when Ollama loads a model; llmhost fixes it when "
                f"a copy starts ({why}) and cannot change it per request: leave it out",
                field=f"options.{name}",
            )


def check_context(options: proto.Options | None, n_ctx: int) -> None:
    """`num_ctx` larger than this copy's context is a 400 naming the limit (smaller is fine: a request
    never holds more than it uses)."""
    if options is not None and options.num_ctx is not None and options.num_ctx > n_ctx:
        raise APIError(
            400,
            f"options.num_ctx {options.num_ctx} is larger than this model's context "
            f"({n_ctx} tokens, --max-total-tokens)",
            field="options.num_ctx",
            extra={"value": options.num_ctx, "limit": n_ctx},
        )


def max_tokens(options: proto.Options | None, n_prompt: int, n_ctx: int) -> int:
    """`num_predict` (negative: until the context is full), bounded by what the context leaves."""
    left = max(1, n_ctx - n_prompt)
    limit = n_ctx if options is None or options.num_ctx is None else options.num_ctx
    if n_prompt >= limit:
        raise APIError(
            400,
            f"the prompt is {n_prompt} tokens: options.num_ctx {limit} leaves no room to generate",
            field="options.num_ctx",
            extra={"value": n_prompt, "limit": limit},
        )
    left = min(left, limit - n_prompt)
    wanted = None if options is None else options.num_predict
    if wanted is None or wanted < 0:
        return left
    if wanted == 0:
        raise APIError(
            400,
            "options.num_predict 0 generates nothing: give a positive number, or -1",
            field="options.num_predict",
        )
    return min(wanted, left)


def sampling(
    options: proto.Options | None, n_tokens: int, n_ctx: int, constraint: Constraint | None
) -> SamplingParams:
    """The engine's parameters: what `options` sets, Ollama's defaults for the rest."""
    if options is not None and options.penalize_newline is False:
        raise APIError(
            400,
            "options.penalize_newline false is not supported: llmhost's repetition penalty "
            "applies to every token, newlines too",
            field="options.penalize_newline",
        )
    given = options.model_dump(exclude_none=True) if options is not None else {}
    fields: dict[str, Any] = {}
    for name in _SAMPLING:
        value = given.get(name, proto.DEFAULTS.get(name))
        if value is not None:
            fields[_RENAMED.get(name, name)] = value
    if fields.get("penalty_last_n") == -1:
        fields["penalty_last_n"] = n_ctx
    try:
        return build_params(
            max_tokens=n_tokens, stop=list(given.get("stop", [])), constraint=constraint, **fields
        )
    except APIError as exc:
        renamed = {v: k for k, v in _RENAMED.items()}
        if exc.field is not None:
            exc.field = f"options.{renamed.get(exc.field, exc.field)}"
        raise


def constraint(fmt: proto.Format | None) -> Constraint | None:
    """`format`: "json" (any JSON object, as Ollama's JSON mode) or a JSON schema."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return Constraint(ConstraintKind.JSON_OBJECT, "", "format")
    if not isinstance(fmt, dict):
        raise APIError(400, 'format must be "json" or a JSON schema object', field="format")
    return schema_constraint(fmt, "format")


def think_ask(think: bool | str | None, model: str, thinks: bool) -> ThinkingAsk:
    """Ollama's `think` as the chat path's ask of a thought: true or a level ("low", "medium", "high")
    turns thinking on, false off (for a model that does not think, what it does anyway); thinking asked
    of a model that does not think is Ollama's own 400. `thinks` comes from `supports_thinking`."""
    if think is None or (think is False and not thinks):
        return ThinkingAsk(field="think")
    if not thinks:
        raise APIError(400, f'"{model}" does not support thinking', field="think")
    if think is False:
        return ThinkingAsk(False, field="think")
    return ThinkingAsk(True, effort=think if isinstance(think, str) else None, field="think")


def supports_tools(template: ChatTemplate | None, tool_format: str) -> bool:
    """Whether the model takes tools (Ollama's "tools" capability): its chat template shows them, or
    the generic format does (--tool-format auto)."""
    return template is not None and (renders_tools(template) or tool_format == "auto")


def check_tools(tools: list[proto.Tool] | None, model: str, template: ChatTemplate, tool_format: str) -> None:
    """Tools the model cannot be shown (--tool-format none) are Ollama's 400, not a silent no-op."""
    if tools and not supports_tools(template, tool_format):
        raise APIError(400, f'"{model}" does not support tools', field="tools")


def supports_thinking(template_source: str, reasoning_format: str) -> bool:
    """Whether the model thinks before it answers (Ollama's "thinking" capability): the chat path's
    own reading of the template's thought tags under `--reasoning-format`."""
    return syntax_for(reasoning_format, template_source) is not None


IMAGE_PLACE = "[img]"  # where Ollama puts a message's next image; the rest go before its text


def with_images(content: str, n_images: int) -> str:
    """`content` with a media marker for each of its `n_images`, where Ollama puts them: at each
    `[img]` in order, the rest before the text."""
    for _ in range(n_images):
        if IMAGE_PLACE not in content:
            return MEDIA_MARKER * n_images + content
        content = content.replace(IMAGE_PLACE, MEDIA_MARKER, 1)
        n_images -= 1
    return content


def chat_media(messages: list[proto.Message], max_bytes: int) -> ChatMedia:
    """The images (or audio: Ollama sends both as `images`) of the messages, in prompt order."""
    items = [
        (f"messages[{i}].images[{j}]", data)
        for i, m in enumerate(messages)
        for j, data in enumerate(m.images or [])
    ]
    return base64_media(items, max_bytes)


def generate_media(images: list[str] | None, max_bytes: int) -> ChatMedia:
    return base64_media([(f"images[{j}]", data) for j, data in enumerate(images or [])], max_bytes)


def _call(call: proto.ToolCall, i: int, turn: int) -> OpenAIToolCall:
    name = call.function.name
    arguments = json.dumps(call.function.arguments)
    return OpenAIToolCall(
        id=call.id or f"call_{turn}_{i}", function=FunctionCall(name=name, arguments=arguments)
    )


def chat_messages(messages: list[proto.Message]) -> list[ChatMessage]:
    """Ollama's messages as the chat path's: a tool result answers the latest call of its tool name."""
    out: list[ChatMessage] = []
    calls: dict[str, str] = {}
    for turn, m in enumerate(messages):
        tool_calls = [_call(c, i, turn) for i, c in enumerate(m.tool_calls or [])] or None
        calls.update({c.function.name: c.id for c in tool_calls or []})
        call_id = m.tool_call_id
        if m.role == "tool" and call_id is None and m.tool_name is not None:
            call_id = calls.get(m.tool_name)
        out.append(
            ChatMessage(
                role=m.role,
                content=with_images(m.content or "", len(m.images or [])),
                name=m.tool_name if m.role == "tool" else None,
                tool_calls=tool_calls,
                tool_call_id=call_id,
                reasoning_content=m.thinking,  # an earlier thought: the template keeps or drops it
            )
        )
    return out


def chat_request(body: proto.ChatRequest) -> ChatCompletionRequest:
    """The chat path's request: messages and tools (sampling comes from `sampling`)."""
    tools = [
        Tool(
            type="function",
            function=FunctionDef(
                name=t.function.name, description=t.function.description, parameters=t.function.parameters
            ),
        )
        for t in body.tools or []
    ]
    return ChatCompletionRequest(messages=chat_messages(body.messages), tools=tools or None, model=body.model)


def generate_messages(body: proto.GenerateRequest) -> ChatCompletionRequest:
    """/api/generate through the model's chat template: the system prompt and the prompt as a user turn."""
    messages = [ChatMessage(role="system", content=body.system)] if body.system else []
    messages.append(ChatMessage(role="user", content=with_images(body.prompt or "", len(body.images or []))))
    return ChatCompletionRequest(messages=messages, model=body.model)
