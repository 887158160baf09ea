"""A chat generation as every chat API runs it (OpenAI chat completions, Anthropic Messages, OpenAI
Responses): the request is first put in OpenAI chat terms, then the template, the tools, the
constraint and the engine are the same for all; only the answer's shape differs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from llmhost.engine import Constraint, SamplingParams, Thinking
from llmhost.engine.media import MediaSpan
from llmhost.engine.request import TokenLogprob
from llmhost.engine.stream import RequestStream
from llmhost.server.limit_fields import LimitFields
from llmhost.server.protocol import shapes
from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.server.serving import generic_tools, thinking, tools
from llmhost.server.serving.chat_template import TemplateMessage
from llmhost.server.serving.context import ServingContext
from llmhost.server.serving.media import MediaReader, chat_media
from llmhost.server.serving.media_sources import MediaSources
from llmhost.server.serving.params import sampling_params
from llmhost.server.serving.reasoning import ReasoningSplitter, ThinkSyntax, opened_by, split, syntax_for
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError


@dataclass(slots=True)
class ChatPlan:
    """What a chat request decided before generating: how the thought and tool calls are read back."""

    tool_mode: str  # "none", "auto" or "forced"
    parser: tools.ToolParser | None
    syntax: ThinkSyntax | None = None  # the thought's tags (None: no thought is split off)
    opened: bool = False  # the prompt opened the thought: the output starts inside it
    budget: int | None = None  # most thought tokens (None: unbounded)

    def splitter(self) -> ReasoningSplitter | None:
        return None if self.syntax is None else ReasoningSplitter(self.syntax, self.opened)


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
            raise APIError(
                400,
                f"tool_choice forces a tool call; {constraint.field} cannot also apply",
                field=constraint.field,
            )
        constraint = tools.forced_constraint(body)
    return ChatPlan(tool_mode, None), constraint


async def render_chat(
    ctx: ServingContext,
    body: ChatCompletionRequest,
    constraint: Constraint | None,
    tool_parser: str,
    ask: thinking.ThinkingAsk | None = None,
    read_media: MediaReader | None = None,
) -> tuple[ChatPlan, Constraint | None, list[int], tuple[MediaSpan, ...]]:
    """What a chat request decided (its plan and constraint), its prompt's tokens and the places of its
    images and audio in them, before sampling (`ask`: what it asks of a thought, else read from the
    OpenAI fields; `read_media`: how its API reads and names its media, else from its parts)."""
    plan, constraint = chat_plan(body, constraint)
    await ctx.check_constraint(constraint)
    ctx.check_capacity()  # a 429 before any work, even a template's 400
    sources = MediaSources.of(ctx.settings)
    media = await (read_media or (lambda s: chat_media(body, s)))(sources)
    ctx.check_media(media)
    template = ctx.chat_template()
    plan.syntax, think = thinking_plan(ctx, body, ask)
    messages, offered, generic = template_inputs(ctx, body)
    text, prompt, spans = await ctx.chat_prompt(messages, offered, think.kwargs, media)
    if plan.tool_mode == "auto" and generic:
        plan.parser = tools.GenericParser(frozenset(t.function.name for t in body.tools or []))
    elif plan.tool_mode == "auto":
        plan.parser = tools.parser_for(tool_parser, template.source)
    if plan.syntax is not None:
        plan.opened = opened_by(text, plan.syntax)
        plan.budget = think.budget
    return plan, constraint, prompt, spans


def template_inputs(
    ctx: ServingContext, body: ChatCompletionRequest
) -> tuple[list[TemplateMessage], list[JSONObject] | None, bool]:
    """The messages and tools the chat template renders, and whether they are in the generic tool format
    (a template that shows no tools, under --tool-format auto; with none, tools are a 400 there)."""
    messages = [tools.template_message(m) for m in body.messages]
    offered = tools.template_tools(body)
    if generic_tools.renders_tools(ctx.chat_template()):
        return messages, offered, False
    if ctx.settings.tool_format == "none":
        if offered:
            raise APIError(
                400,
                "tools: this model's chat template shows no tools, and the server runs with "
                "--tool-format none (auto describes them in a system message)",
                field="tools",
            )
        return messages, None, False
    return generic_tools.conversation(messages, offered), None, True


def planned(ctx: ServingContext, plan: ChatPlan, params: SamplingParams) -> SamplingParams:
    """`params` with what the plan reads back from the output: the tool-call markers written out as
    text, the thought tracked (counted, bounded, left unconstrained)."""
    if plan.parser is not None:
        params = replace(params, render_special=ctx.marker_tokens(plan.parser.markers))
    if plan.syntax is not None:
        params = replace(
            params,
            thinking=Thinking(
                tuple(ctx.tokenize(plan.syntax.start, add_special=False)),
                tuple(ctx.tokenize(plan.syntax.end, add_special=False)),
                plan.opened,
                plan.budget,
            ),
        )
    return params


async def start_chat(
    ctx: ServingContext,
    body: ChatCompletionRequest,
    constraint: Constraint | None,
    rid: str,
    fields: LimitFields,
    tool_parser: str,
    ask: thinking.ThinkingAsk | None = None,
    read_media: MediaReader | None = None,
) -> ChatRun:
    """Render, tokenize and submit a chat request (`constraint`: its structured output, if any; `fields`:
    its token-limit fields in its API's words; `ask`: what it asks of a thought, else read from the
    OpenAI fields; `read_media`: how its API reads and names its media, else from its parts)."""
    ctx.names.check(body.model)
    plan, constraint, prompt, spans = await render_chat(ctx, body, constraint, tool_parser, ask, read_media)
    max_tokens = body.max_completion_tokens or body.max_tokens or ctx.remaining(len(prompt))
    top = body.top_logprobs or 0
    params = planned(ctx, plan, sampling_params(body, max_tokens, top if body.logprobs else None, constraint))
    adapters = ctx.adapters.by_model(body.model, body.lora)
    streams = ctx.submit_choices(rid, [prompt], [params], body.n, fields, adapters, body.priority, spans)
    return ChatRun(plan, streams, len(prompt))


def thinking_plan(
    ctx: ServingContext, body: ChatCompletionRequest, ask: thinking.ThinkingAsk | None = None
) -> tuple[ThinkSyntax | None, thinking.ThinkingPlan]:
    """The thought's tags in this model's output, and the template kwargs and budget of the request."""
    template = ctx.chat_template()
    syntax = syntax_for(ctx.settings.reasoning_format, template.source)
    ask = ask or thinking.from_effort(body.reasoning_effort, body.reasoning_budget)
    think = thinking.plan(
        ask,
        template,
        syntax,
        ctx.settings.template_kwargs(),
        body.chat_template_kwargs,
        ctx.settings.reasoning_budget,
        ctx.settings.reasoning_budget_max,
    )
    return syntax, think


@dataclass(slots=True)
class Reply:
    """A choice's output read back: its thought, its content and its tool calls (`answer`: all that
    followed the thought, calls and all)."""

    reasoning: str | None
    content: str | None
    calls: list[tools.ParsedCall]
    answer: str


def read_message(plan: ChatPlan, text: str) -> Reply:
    """The thought, the content and the tool calls of a whole output (calls are read in the answer)."""
    reasoning: str | None = None
    if plan.syntax is not None:
        reasoning, text = split(text, plan.syntax, plan.opened)
    if plan.tool_mode == "forced":  # the output is call JSON: never content, cut or not
        return Reply(reasoning, None, tools.forced_calls(text), text)
    if plan.tool_mode == "auto" and plan.parser is not None:
        content, calls = plan.parser.parse(text)
        return Reply(reasoning, content, calls, text)
    return Reply(reasoning, text, [], text)


class StreamedOutput:
    """One streamed choice: the thought as it comes, then answer text as soon as it cannot start a tool
    call, the calls at the end."""

    def __init__(self, plan: ChatPlan) -> None:
        streamed = plan.tool_mode != "none"
        self._pending = tools.StreamedChoice(plan.tool_mode, plan.parser) if streamed else None
        self._splitter = plan.splitter()
        self.answer_fed = ""  # the answer text the last feed read (before tool calls were held back)

    def feed(self, text: str, finished: bool) -> tuple[str, str, list[tools.ParsedCall]]:
        """(thought, answer text, calls) safe to send after `text`; calls only once `finished`."""
        thought = ""
        if self._splitter is not None:
            thought, text = self._splitter.feed(text)
            if finished:
                more_thought, more_text = self._splitter.finish()
                thought, text = thought + more_thought, text + more_text
        self.answer_fed = text
        if self._pending is None:
            return thought, text, []
        out = self._pending.feed(text)
        if not finished:
            return thought, out, []
        rest, calls = self._pending.finish()
        return thought, out + rest, calls


def logprob_entries(
    token_text: Callable[[int], str], logprobs: list[TokenLogprob]
) -> list[shapes.TokenLogprob]:
    """OpenAI's per-token logprobs (chat's `logprobs.content`, Responses' `output_text.logprobs`)."""

    def entry(token: int, logprob: float) -> shapes.TopLogprob:
        s = token_text(token)
        return {"token": s, "logprob": logprob, "bytes": list(s.encode("utf-8"))}

    def chosen(lp: TokenLogprob) -> shapes.TokenLogprob:
        s = token_text(lp.token)
        return {
            "token": s,
            "logprob": lp.logprob,
            "bytes": list(s.encode("utf-8")),
            "top_logprobs": [entry(t, v) for t, v in lp.top],
        }

    return [chosen(lp) for lp in logprobs]
