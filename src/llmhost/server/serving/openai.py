"""OpenAI completions and chat completions over the engine: `n` choices and lists of prompts, structured
output, tool calls."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmhost.engine import FinishReason, GenerationEvent, TokenLogprob
from llmhost.engine.loop import RequestStream
from llmhost.server.errors import APIError
from llmhost.server.protocol.openai import ChatCompletionRequest, CompletionRequest, SamplingFields
from llmhost.server.serving import tools
from llmhost.server.serving.chat import ChatPlan, read_message, start_chat
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

FINISH = {
    FinishReason.LENGTH: "length",
    FinishReason.EOS: "stop",
    FinishReason.STOP: "stop",
    FinishReason.ABORT: "abort",
    FinishReason.ERROR: "error",
    FinishReason.TIMEOUT: "error",
}


def usage(finals: list[GenerationEvent], n: int) -> dict[str, Any]:
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
    }


class OpenAIServing:
    def __init__(self, ctx: ServingContext, tool_parser: str = "auto") -> None:
        self.ctx = ctx
        self.tool_parser = tool_parser

    def _envelope(
        self,
        rid: str,
        obj: str,
        body: SamplingFields,
        choices: list[Any],
        finals: list[GenerationEvent] | None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": rid,
            "object": obj,
            "created": int(time.time()),
            "model": body.model or self.ctx.settings.model_name,
            "choices": choices,
        }
        if finals:
            out["usage"] = usage(finals, body.n)
            out["timings"] = finals[0].timings.as_dict() if finals[0].timings else None
        return out

    # -- completions -------------------------------------------------------------------------------
    async def completion(self, body: CompletionRequest, request: Request) -> Response:
        ctx = self.ctx
        if body.best_of is not None and body.best_of != body.n:
            raise APIError(400, f"best_of ({body.best_of}) other than n ({body.n}) is not supported",
                           field="best_of")  # fmt: skip
        constraint = openai_constraint(body)
        await ctx.check_constraint(constraint)
        prompts = [await self._prompt(p) for p in body.prompts()]
        params = [
            sampling_params(body, body.max_tokens or ctx.remaining(len(p)), body.logprobs, constraint)
            for p in prompts
        ]
        rid = new_id("cmpl")
        streams = ctx.submit_choices(rid, prompts, params, body.n, "completions")
        echoes = [self._echo(body, p, raw) for p, raw in zip(prompts, body.prompts(), strict=True)]
        if body.stream:
            return EventStreamResponse(self._completion_stream(rid, body, streams, echoes), streams)
        results = await ctx.collect_all(streams, request)
        choices = [self._completion_choice(i, body, events, echoes[i // body.n]) for i, events in
                   enumerate(results)]  # fmt: skip
        return JSONResponse(self._envelope(rid, "text_completion", body, choices, [r[-1] for r in results]))

    async def _prompt(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return await self.ctx.prompt_tokens(prompt)
        return self.ctx.check_tokens(list(prompt), "prompt")

    def _echo(self, body: CompletionRequest, tokens: list[int], raw: str | list[int]) -> str:
        if not body.echo:
            return ""
        return raw if isinstance(raw, str) else self.ctx.engine.detokenize(tokens)

    def _completion_choice(
        self, index: int, body: CompletionRequest, events: list[GenerationEvent], echo: str
    ) -> dict[str, Any]:
        last = events[-1]
        raise_if_failed(last)
        self.ctx.finished("completions", last)
        return {
            "index": index,
            "text": echo + "".join(e.text for e in events),
            "logprobs": self._completion_logprobs(events) if body.logprobs is not None else None,
            "finish_reason": FINISH[last.finish_reason or FinishReason.LENGTH],
        }

    def _completion_logprobs(self, events: list[GenerationEvent]) -> dict[str, Any]:
        lps = [lp for e in events for lp in e.logprobs]
        text = self.ctx.engine.token_text
        return {
            "tokens": [text(lp.token) for lp in lps],
            "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [{text(t): v for t, v in lp.top} for lp in lps],
            "text_offset": [],
        }

    async def _completion_stream(
        self, rid: str, body: CompletionRequest, streams: list[RequestStream], echoes: list[str]
    ) -> AsyncIterator[str]:
        def choice(index: int, event: GenerationEvent, finish: str | None) -> dict[str, Any] | None:
            if not event.text and not finish:
                return None
            c = {"index": index, "text": event.text, "logprobs": None, "finish_reason": finish}
            if body.logprobs is not None and event.logprobs:
                c["logprobs"] = self._completion_logprobs([event])
            return c

        first = [
            {"index": i, "text": echoes[i // body.n], "logprobs": None, "finish_reason": None}
            for i in range(len(streams))
            if echoes[i // body.n]
        ]
        async for line in self._stream(rid, body, streams, "completions", "text_completion", first, choice):
            yield line

    async def _stream(
        self,
        rid: str,
        body: SamplingFields,
        streams: list[RequestStream],
        api: str,
        obj: str,
        first: list[dict[str, Any]],
        choice: Callable[[int, GenerationEvent, str | None], dict[str, Any] | None],
    ) -> AsyncIterator[str]:
        """SSE chunks of either OpenAI API: `first` choices, a chunk per text delta, usage, [DONE]."""
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        for c in first:
            yield sse(self._envelope(rid, obj, body, [c], None))
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
                chunk = self._envelope(rid, obj, body, [delta], None)
                if event.finished and event.timings:
                    chunk["timings"] = event.timings.as_dict()
                yield sse(chunk)
            if event.finished:
                finals[index] = event
                self.ctx.finished(api, event)
        if include_usage:
            yield sse(self._envelope(rid, obj, body, [], [e for e in finals if e is not None]))
        yield sse("[DONE]")

    # -- chat --------------------------------------------------------------------------------------
    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        rid = new_id("chatcmpl")
        run = await start_chat(self.ctx, body, openai_constraint(body), rid, "chat", self.tool_parser)
        plan, streams = run.plan, run.streams
        if body.stream:
            return EventStreamResponse(self._chat_stream(rid, body, plan, streams), streams)
        results = await self.ctx.collect_all(streams, request)
        choices = [self._chat_choice(i, body, plan, events) for i, events in enumerate(results)]
        return JSONResponse(self._envelope(rid, "chat.completion", body, choices, [r[-1] for r in results]))

    @staticmethod
    def _message(plan: ChatPlan, text: str) -> tuple[dict[str, Any], bool]:
        """The assistant message of a choice, and whether it holds tool calls."""
        content, calls = read_message(plan, text)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [c.as_openai(i) for i, c in enumerate(calls)]
        return message, bool(calls)

    def _chat_choice(
        self, index: int, body: ChatCompletionRequest, plan: ChatPlan, events: list[GenerationEvent]
    ) -> dict[str, Any]:
        last = events[-1]
        raise_if_failed(last)
        self.ctx.finished("chat", last)
        message, called = self._message(plan, "".join(e.text for e in events))
        for call in message.get("tool_calls", []):
            del call["index"]
        finish = "tool_calls" if called else FINISH[last.finish_reason or FinishReason.LENGTH]
        return {
            "index": index,
            "message": message,
            "logprobs": self._chat_logprobs(events) if body.logprobs else None,
            "finish_reason": finish,
        }

    def _chat_logprobs(self, events: list[GenerationEvent]) -> dict[str, Any]:
        text = self.ctx.engine.token_text

        def entry(token: int, logprob: float) -> dict[str, Any]:
            s = text(token)
            return {"token": s, "logprob": logprob, "bytes": list(s.encode("utf-8"))}

        def item(lp: TokenLogprob) -> dict[str, Any]:
            return entry(lp.token, lp.logprob) | {"top_logprobs": [entry(t, v) for t, v in lp.top]}

        return {"content": [item(lp) for e in events for lp in e.logprobs]}

    async def _chat_stream(
        self, rid: str, body: ChatCompletionRequest, plan: ChatPlan, streams: list[RequestStream]
    ) -> AsyncIterator[str]:
        pending = [tools.StreamedChoice(plan.tool_mode, plan.parser) for _ in streams]

        def choice(index: int, event: GenerationEvent, finish: str | None) -> dict[str, Any] | None:
            if plan.tool_mode == "none":
                delta: dict[str, Any] = {"content": event.text} if event.text else {}
            else:
                delta = self._tool_delta(pending[index], event)
                if delta.get("tool_calls"):
                    finish = "tool_calls"
            if not delta and not finish:
                return None
            c: dict[str, Any] = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
            if body.logprobs and event.logprobs:
                c["logprobs"] = self._chat_logprobs([event])
            return c

        first = [
            {
                "index": i,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            for i in range(len(streams))
        ]
        async for line in self._stream(rid, body, streams, "chat", "chat.completion.chunk", first, choice):
            yield line

    @staticmethod
    def _tool_delta(pending: tools.StreamedChoice, event: GenerationEvent) -> dict[str, Any]:
        """Content as soon as it cannot start a call; at the end, what is left and the calls."""
        content = pending.feed(event.text)
        calls: list[tools.ParsedCall] = []
        if event.finished:
            rest, calls = pending.finish()
            content += rest
        delta: dict[str, Any] = {"content": content} if content else {}
        if calls:
            delta["tool_calls"] = [c.as_openai(i) for i, c in enumerate(calls)]
        return delta
