"""A chat generation as every chat API runs it (OpenAI chat completions, Anthropic Messages, OpenAI
Responses): the request is first put in OpenAI chat terms, then the template, the tools, the
constraint and the engine are the same for all; only the answer's shape differs."""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.engine import Constraint
from llmhost.engine.loop import RequestStream
from llmhost.server.errors import APIError
from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.server.serving import tools
from llmhost.server.serving.context import ServingContext
from llmhost.server.serving.params import sampling_params


@dataclass(slots=True)
class ChatPlan:
    """What a chat request decided before generating: how tool calls are read back."""

    tool_mode: str  # "none", "auto" or "forced"
    parser: tools.ToolParser | None


@dataclass(slots=True)
class ChatRun:
    """A chat request on its way: its streams (one per choice) and its prompt's length."""

    plan: ChatPlan
    streams: list[RequestStream]
    prompt_tokens: int


def chat_plan(
    body: ChatCompletionRequest, constraint: Constraint | None
) -> tuple[ChatPlan, Constraint | None]:
    """The tool mode, and the constraint the output follows (forced calls bring their own)."""
    tool_mode = tools.mode(body)
    if tool_mode == "forced":
        if constraint is not None:
            raise APIError(400, f"tool_choice forces a tool call; {constraint.field} cannot also apply",
                           field=constraint.field)  # fmt: skip
        constraint = tools.forced_constraint(body)
    return ChatPlan(tool_mode, None), constraint


async def start_chat(
    ctx: ServingContext,
    body: ChatCompletionRequest,
    constraint: Constraint | None,
    rid: str,
    api: str,
    tool_parser: str,
) -> ChatRun:
    """Render, tokenize and submit a chat request (`constraint`: its structured output, if any)."""
    plan, constraint = chat_plan(body, constraint)
    await ctx.check_constraint(constraint)
    messages = [tools.template_message(m) for m in body.messages]
    prompt = await ctx.chat_prompt_tokens(messages, tools.template_tools(body))
    if plan.tool_mode == "auto":
        plan.parser = tools.parser_for(tool_parser, ctx.chat_template().source)
    max_tokens = body.max_completion_tokens or body.max_tokens or ctx.remaining(len(prompt))
    top = body.top_logprobs or 0
    params = sampling_params(body, max_tokens, top if body.logprobs else None, constraint)
    adapters = ctx.adapters.by_model(body.model, body.lora)
    streams = ctx.submit_choices(rid, [prompt], [params], body.n, api, adapters)
    return ChatRun(plan, streams, len(prompt))


def read_message(plan: ChatPlan, text: str) -> tuple[str | None, list[tools.ParsedCall]]:
    """The content and the tool calls of a whole output."""
    if plan.tool_mode == "forced":
        calls = tools.forced_calls(text)
        return (None if calls else text), calls
    if plan.tool_mode == "auto" and plan.parser is not None:
        return plan.parser.parse(text)
    return text, []


class StreamedOutput:
    """One streamed choice: text as soon as it cannot start a tool call, the calls at the end."""

    def __init__(self, plan: ChatPlan) -> None:
        streamed = plan.tool_mode != "none"
        self._pending = tools.StreamedChoice(plan.tool_mode, plan.parser) if streamed else None

    def feed(self, text: str, finished: bool) -> tuple[str, list[tools.ParsedCall]]:
        if self._pending is None:
            return text, []
        out = self._pending.feed(text)
        if not finished:
            return out, []
        rest, calls = self._pending.finish()
        return out + rest, calls
