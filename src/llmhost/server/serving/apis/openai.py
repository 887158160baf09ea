"""OpenAI completions and chat completions over the engine: `n` choices and lists of prompts, structured
output, tool calls."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Literal, NamedTuple

from starlette.requests import Request
from starlette.responses import Response

from llmhost.engine import Constraint, FinishReason, GenerationEvent, SamplingParams
from llmhost.engine.stream import RequestStream
from llmhost.server import limit_fields
from llmhost.server.protocol import shapes
from llmhost.server.protocol.openai import ChatCompletionRequest, CompletionRequest, SamplingFields
from llmhost.server.protocol.outputs import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionResponse,
    Finish,
    json_response,
)
from llmhost.server.serving.apis import scoring
from llmhost.server.serving.chat import ChatPlan, StreamedOutput, logprob_entries, read_message, start_chat
from llmhost.server.serving.context import (
    EventStreamResponse,
    ServingContext,
    merge,
    new_id,
    openai_error_event,
    raise_if_failed,
    sse,
)
from llmhost.server.serving.params import sampling_params
from llmhost.server.serving.structured import openai_constraint
from llmhost.web.errors import APIError


class StreamHead(NamedTuple):
    """What every chunk of one stream repeats."""

    rid: str
    obj: str
    created: int
    model: str


FINISH: dict[FinishReason, Finish] = {
    FinishReason.LENGTH: "length",
    FinishReason.EOS: "stop",
    FinishReason.STOP: "stop",
    FinishReason.ABORT: "abort",
    FinishReason.ERROR: "error",
    FinishReason.TIMEOUT: "error",
}


def check_completion(body: CompletionRequest) -> None:
    """A 400 naming the fields of a combination that cannot be served as asked."""
    if body.best_of is not None and body.best_of != body.n:
        raise APIError(
            400, f"best_of ({body.best_of}) other than n ({body.n}) is not supported", field="best_of"
        )
    if body.max_tokens == 0 and not body.echo:
        raise APIError(
            400,
            "max_tokens 0 generates nothing: it scores a prompt, with echo true (and "
            "logprobs for the prompt's log-probabilities)",
            field="max_tokens",
        )


def usage(finals: list[GenerationEvent], n: int) -> shapes.Usage:
    """Prompt tokens once per prompt (its `n` choices share it), completion tokens of every choice."""
    firsts = finals[::n]
    prompt = sum(e.prompt_tokens for e in firsts)
    completion = sum(e.completion_tokens for e in finals)
    cached = sum(e.timings.cache_n for e in firsts if e.timings)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": sum(e.reasoning_tokens for e in finals)},
    }


def timings(finals: list[GenerationEvent]) -> shapes.Timings | None:
    """llama-server's `timings`, of the first choice."""
    return finals[0].timings.as_dict() if finals[0].timings else None


class OpenAIServing:
    def __init__(self, ctx: ServingContext, tool_parser: str = "auto") -> None:
        self.ctx = ctx
        self.tool_parser = tool_parser

    def _model(self, body: SamplingFields) -> str:
        return body.model or self.ctx.settings.model_name

    @staticmethod
    def _chunk(head: StreamHead, choices: list[shapes.ChunkChoice]) -> shapes.Chunk:
        """A streamed chunk: plain dicts on the per-token path (protocol/shapes.py says why)."""
        return {
            "id": head.rid,
            "object": head.obj,
            "created": head.created,
            "model": head.model,
            "choices": choices,
        }

    def _usage_chunk(
        self, head: StreamHead, body: SamplingFields, finals: list[GenerationEvent]
    ) -> shapes.Chunk:
        chunk = self._chunk(head, [])
        if finals:
            chunk["usage"] = usage(finals, body.n)
            chunk["timings"] = timings(finals)
        return chunk

    # -- completions -------------------------------------------------------------------------------
    async def completion(self, body: CompletionRequest, request: Request) -> Response:
        ctx = self.ctx
        ctx.names.check(body.model)
        check_completion(body)
        constraint = openai_constraint(body)
        await ctx.check_constraint(constraint)
        prompts = [await self._prompt(p) for p in body.prompts()]
        # echo with logprobs scores the prompt: every prompt token's logprob (no prefix-cache reuse)
        scored = body.echo and body.logprobs is not None
        params = [self._params(body, len(p), constraint, scored) for p in prompts]
        rid = new_id("cmpl")
        adapters = ctx.adapters.by_model(body.model, body.lora)
        streams = ctx.submit_choices(
            rid, prompts, params, body.n, limit_fields.COMPLETIONS, adapters, body.priority
        )
        echoes = [self._echo(body, p, raw) for p, raw in zip(prompts, body.prompts(), strict=True)]
        if body.stream:
            return EventStreamResponse(self._completion_stream(rid, body, streams, echoes), streams)
        results = await ctx.collect_all(streams, request)
        choices = [
            self._completion_choice(i, body, events, echoes[i // body.n]) for i, events in enumerate(results)
        ]
        finals = [r[-1] for r in results]
        return json_response(
            CompletionResponse(
                id=rid,
                object="text_completion",
                created=int(time.time()),
                model=self._model(body),
                choices=choices,
                usage=usage(finals, body.n),
                timings=timings(finals),
            )
        )

    def _params(
        self, body: CompletionRequest, n_prompt: int, constraint: Constraint | None, scored: bool
    ) -> SamplingParams:
        max_tokens = body.max_tokens if body.max_tokens is not None else self.ctx.remaining(n_prompt)
        params = sampling_params(body, max_tokens, body.logprobs, constraint)
        params.prompt_logprobs = scored
        return params

    async def _prompt(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return await self.ctx.prompt_tokens(prompt)
        # token ids are the prompt as given: no BOS is added (a scorer that tokenized it decides)
        return self.ctx.check_tokens(list(prompt), "prompt")

    def _echo(self, body: CompletionRequest, tokens: list[int], raw: str | list[int]) -> scoring.Echo:
        if not body.echo:
            return scoring.Echo()
        pieces = [self.ctx.engine.token_bytes(t) for t in tokens]
        return scoring.echo_prompt(tokens, pieces, raw if isinstance(raw, str) else None)

    def _completion_choice(
        self, index: int, body: CompletionRequest, events: list[GenerationEvent], echo: scoring.Echo
    ) -> CompletionChoice:
        last = events[-1]
        raise_if_failed(last)
        self.ctx.finished("completions", last)
        logprobs = None
        if body.logprobs is not None:
            logprobs = self._completion_logprobs(events, echo if body.echo else None, len(echo.text))
        text = echo.text + "".join(e.text for e in events)
        finish = FINISH[last.finish_reason or FinishReason.LENGTH]
        return CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish)

    def _completion_logprobs(
        self, events: list[GenerationEvent], echo: scoring.Echo | None, offsets: scoring.Offsets | int
    ) -> shapes.CompletionLogprobs:
        """The generated tokens' logprobs, after the echoed prompt's when `echo` is given; `offsets`
        counts on the choice's text (or starts at that many characters)."""
        engine = self.ctx.engine
        builder = scoring.LogprobsBuilder(engine.token_text, engine.token_bytes)
        counter = offsets if isinstance(offsets, scoring.Offsets) else scoring.Offsets(offsets)
        out = builder.generated([lp for e in events for lp in e.logprobs], counter)
        if echo is None:
            return out
        return scoring.concat(builder.prompt(echo, [lp for e in events for lp in e.prompt_logprobs]), out)

    def _completion_stream(
        self, rid: str, body: CompletionRequest, streams: list[RequestStream], echoes: list[scoring.Echo]
    ) -> AsyncIterator[str]:
        # echo with logprobs: each choice's first chunk holds the prompt and its logprobs, which come
        # with the choice's first event; a plain echo is sent at once
        scored = body.echo and body.logprobs is not None
        counters = [scoring.Offsets(len(echoes[i // body.n].text)) for i in range(len(streams))]
        started: set[int] = set()

        def choice(index: int, event: GenerationEvent, finish: str | None) -> shapes.ChunkChoice | None:
            echo = echoes[index // body.n] if scored and index not in started else None
            started.add(index)
            text = (echo.text if echo else "") + event.text
            if not text and not finish and echo is None:
                return None
            c: shapes.ChunkChoice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
            if body.logprobs is not None and (event.logprobs or echo is not None):
                c["logprobs"] = self._completion_logprobs([event], echo, counters[index])
            return c

        first: list[shapes.ChunkChoice] = [
            {"index": i, "text": echoes[i // body.n].text, "logprobs": None, "finish_reason": None}
            for i in range(len(streams))
            if echoes[i // body.n].text and not scored
        ]
        return self._stream(rid, body, streams, "completions", "text_completion", first, choice)

    async def _stream(
        self,
        rid: str,
        body: SamplingFields,
        streams: list[RequestStream],
        api: str,
        obj: str,
        first: list[shapes.ChunkChoice],
        choice: Callable[[int, GenerationEvent, str | None], shapes.ChunkChoice | None],
    ) -> AsyncIterator[str]:
        """SSE chunks of either OpenAI API: `first` choices, a chunk per text delta, usage, [DONE]."""
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        # every chunk of a stream carries the same id, created time and model (OpenAI's chunks do)
        head = StreamHead(rid, obj, int(time.time()), self._model(body))
        for c in first:
            yield sse(self._chunk(head, [c]))
        finals: list[GenerationEvent | None] = [None] * len(streams)
        async for index, event in merge(streams):
            if event.error is not None:
                timeout = event.finish_reason is FinishReason.TIMEOUT
                yield openai_error_event(
                    event.error, "timeout" if timeout else "server_error", 503 if timeout else 500
                )
                return
            finish = FINISH[event.finish_reason] if event.finish_reason else None
            delta = choice(index, event, finish)
            if delta is not None:
                chunk = self._chunk(head, [delta])
                if event.finished and event.timings:
                    chunk["timings"] = event.timings.as_dict()
                yield sse(chunk)
            if event.finished:
                finals[index] = event
                self.ctx.finished(api, event)
        if include_usage:
            yield sse(self._usage_chunk(head, body, [e for e in finals if e is not None]))
        yield sse("[DONE]")

    # -- chat --------------------------------------------------------------------------------------
    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        rid = new_id("chatcmpl")
        fields = limit_fields.CHAT_MAX_COMPLETION if body.max_completion_tokens else limit_fields.CHAT
        run = await start_chat(self.ctx, body, openai_constraint(body), rid, fields, self.tool_parser)
        plan, streams = run.plan, run.streams
        if body.stream:
            return EventStreamResponse(self._chat_stream(rid, body, plan, streams), streams)
        results = await self.ctx.collect_all(streams, request)
        choices = [self._chat_choice(i, body, plan, events) for i, events in enumerate(results)]
        finals = [r[-1] for r in results]
        return json_response(
            ChatCompletionResponse(
                id=rid,
                object="chat.completion",
                created=int(time.time()),
                model=self._model(body),
                choices=choices,
                usage=usage(finals, body.n),
                timings=timings(finals),
            )
        )

    @staticmethod
    def _message(plan: ChatPlan, text: str) -> AssistantMessage:
        """The assistant message of a choice (the thought and tool calls only when it has them)."""
        reply = read_message(plan, text)
        message = AssistantMessage(role="assistant", content=reply.content)
        if reply.reasoning is not None:
            message.reasoning_content = reply.reasoning
        if reply.calls:
            message.tool_calls = [c.as_openai() for c in reply.calls]
        return message

    def _chat_choice(
        self, index: int, body: ChatCompletionRequest, plan: ChatPlan, events: list[GenerationEvent]
    ) -> ChatChoice:
        last = events[-1]
        raise_if_failed(last)
        self.ctx.finished("chat", last)
        message = self._message(plan, "".join(e.text for e in events))
        finish: Finish | Literal["tool_calls"] = FINISH[last.finish_reason or FinishReason.LENGTH]
        if message.tool_calls:
            finish = "tool_calls"
        logprobs = self._chat_logprobs(events) if body.logprobs else None
        return ChatChoice(index=index, message=message, logprobs=logprobs, finish_reason=finish)

    def _chat_logprobs(self, events: list[GenerationEvent]) -> shapes.ChatLogprobs:
        chosen = [lp for e in events for lp in e.logprobs]
        return {"content": logprob_entries(self.ctx.engine.token_text, chosen)}

    def _chat_stream(
        self, rid: str, body: ChatCompletionRequest, plan: ChatPlan, streams: list[RequestStream]
    ) -> AsyncIterator[str]:
        outputs = [StreamedOutput(plan) for _ in streams]

        def choice(index: int, event: GenerationEvent, finish: str | None) -> shapes.ChunkChoice | None:
            delta = self._delta(outputs[index], event)
            if delta.get("tool_calls"):
                finish = "tool_calls"
            if not delta and not finish:
                return None
            c: shapes.ChunkChoice = {
                "index": index,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish,
            }
            if body.logprobs and event.logprobs:
                c["logprobs"] = self._chat_logprobs([event])
            return c

        first: list[shapes.ChunkChoice] = [
            {
                "index": i,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            for i in range(len(streams))
        ]
        return self._stream(rid, body, streams, "chat", "chat.completion.chunk", first, choice)

    @staticmethod
    def _delta(output: StreamedOutput, event: GenerationEvent) -> shapes.Delta:
        """The thought as it comes; content as soon as it cannot start a call; at the end, the calls."""
        thought, content, calls = output.feed(event.text, event.finished)
        delta: shapes.Delta = {"reasoning_content": thought} if thought else {}
        if content:
            delta["content"] = content
        if calls:
            delta["tool_calls"] = [c.as_openai(i) for i, c in enumerate(calls)]
        return delta
