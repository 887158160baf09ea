"""OpenAI completions and chat completions over the engine."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llmhost.engine import FinishReason, GenerationEvent, SamplingParams, TokenLogprob
from llmhost.engine.loop import RequestStream
from llmhost.server.errors import APIError
from llmhost.server.protocol.openai import ChatCompletionRequest, CompletionRequest, SamplingFields
from llmhost.server.serving.context import (
    EventStreamResponse,
    ServingContext,
    build_params,
    new_id,
    openai_error_event,
    raise_if_failed,
    sse,
)

FINISH = {
    FinishReason.LENGTH: "length",
    FinishReason.EOS: "stop",
    FinishReason.STOP: "stop",
    FinishReason.ABORT: "abort",
    FinishReason.ERROR: "error",
    FinishReason.TIMEOUT: "error",
}


def sampling_params(body: SamplingFields, max_tokens: int, logprobs: int | None) -> SamplingParams:
    bias: dict[int, float] = {}
    for key, value in (body.logit_bias or {}).items():
        try:
            bias[int(key)] = value
        except ValueError as exc:
            raise APIError(422, f"logit_bias key {key!r} is not a token id", field="logit_bias") from exc
    return build_params(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_k=body.top_k,
        top_p=body.top_p,
        min_p=body.min_p,
        repetition_penalty=body.repetition_penalty,
        frequency_penalty=body.frequency_penalty,
        presence_penalty=body.presence_penalty,
        seed=body.seed,
        stop=body.stop_list(),
        ignore_eos=body.ignore_eos,
        logit_bias=bias,
        logprobs=logprobs,
    )


def usage(prompt_tokens: int, completion_tokens: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


class OpenAIServing:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx

    # -- completions -------------------------------------------------------------------------------
    async def completion(self, body: CompletionRequest, request: Request) -> Response:
        ctx = self.ctx
        prompt = (
            await ctx.prompt_tokens(body.prompt)
            if isinstance(body.prompt, str)
            else ctx.check_tokens(list(body.prompt), "prompt")
        )
        max_tokens = body.max_tokens if body.max_tokens is not None else ctx.remaining(len(prompt))
        params = sampling_params(body, max_tokens, body.logprobs)
        rid = new_id("cmpl")
        stream = ctx.submit(rid, prompt, params, "completions")
        echo = (
            (body.prompt if isinstance(body.prompt, str) else ctx.engine.detokenize(prompt))
            if body.echo
            else ""
        )
        if body.stream:
            gen = self._completion_stream(rid, body, stream, echo)
            return EventStreamResponse(gen, stream)
        events = await ctx.collect(stream, request)
        last = events[-1]
        raise_if_failed(last)
        ctx.finished("completions", last)
        text = echo + "".join(e.text for e in events)
        choice = {
            "index": 0,
            "text": text,
            "logprobs": self._completion_logprobs(events) if body.logprobs is not None else None,
            "finish_reason": FINISH[last.finish_reason or FinishReason.LENGTH],
        }
        return JSONResponse(self._envelope(rid, "text_completion", body, [choice], last))

    def _envelope(
        self, rid: str, obj: str, body: SamplingFields, choices: list[Any], last: GenerationEvent | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": rid,
            "object": obj,
            "created": int(time.time()),
            "model": body.model or self.ctx.settings.model_name,
            "choices": choices,
        }
        if last is not None:
            cached = last.timings.cache_n if last.timings else 0
            out["usage"] = usage(last.prompt_tokens, last.completion_tokens, cached)
            out["timings"] = last.timings.as_dict() if last.timings else None
        return out

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
        self, rid: str, body: CompletionRequest, stream: RequestStream, echo: str
    ) -> AsyncIterator[str]:
        def choice(event: GenerationEvent, finish: str | None) -> dict[str, Any]:
            c = self._delta_choice(event.text, finish)
            if body.logprobs is not None and event.logprobs:
                c["logprobs"] = self._completion_logprobs([event])
            return c

        first = [self._delta_choice(echo, None)] if echo else []
        async for line in self._stream(rid, body, stream, "completions", "text_completion", first, choice):
            yield line

    async def _stream(
        self,
        rid: str,
        body: SamplingFields,
        stream: RequestStream,
        api: str,
        obj: str,
        first: list[dict[str, Any]],
        choice: Callable[[GenerationEvent, str | None], dict[str, Any]],
    ) -> AsyncIterator[str]:
        """SSE chunks of either OpenAI API: `first` choices, one chunk per text delta, usage, [DONE]."""
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        for c in first:
            yield sse(self._envelope(rid, obj, body, [c], None))
        async for event in stream:
            if event.error is not None:
                timeout = event.finish_reason is FinishReason.TIMEOUT
                yield openai_error_event(
                    event.error, "timeout" if timeout else "server_error", 503 if timeout else 500
                )
                break
            finish = FINISH[event.finish_reason] if event.finish_reason else None
            if event.text or finish:
                chunk = self._envelope(rid, obj, body, [choice(event, finish)], None)
                if event.finished and event.timings:
                    chunk["timings"] = event.timings.as_dict()
                yield sse(chunk)
            if event.finished:
                self.ctx.finished(api, event)
                if include_usage:
                    yield sse(self._envelope(rid, obj, body, [], event))
        yield sse("[DONE]")

    @staticmethod
    def _delta_choice(text: str, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    # -- chat --------------------------------------------------------------------------------------
    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        ctx = self.ctx
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        prompt = await ctx.chat_prompt_tokens(messages)
        max_tokens = body.max_completion_tokens or body.max_tokens or ctx.remaining(len(prompt))
        top = body.top_logprobs or 0
        params = sampling_params(body, max_tokens, top if body.logprobs else None)
        rid = new_id("chatcmpl")
        stream = ctx.submit(rid, prompt, params, "chat")
        if body.stream:
            return EventStreamResponse(self._chat_stream(rid, body, stream), stream)
        events = await ctx.collect(stream, request)
        last = events[-1]
        raise_if_failed(last)
        ctx.finished("chat", last)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "".join(e.text for e in events)},
            "logprobs": self._chat_logprobs(events) if body.logprobs else None,
            "finish_reason": FINISH[last.finish_reason or FinishReason.LENGTH],
        }
        return JSONResponse(self._envelope(rid, "chat.completion", body, [choice], last))

    def _chat_logprobs(self, events: list[GenerationEvent]) -> dict[str, Any]:
        text = self.ctx.engine.token_text

        def entry(token: int, logprob: float) -> dict[str, Any]:
            s = text(token)
            return {"token": s, "logprob": logprob, "bytes": list(s.encode("utf-8"))}

        def item(lp: TokenLogprob) -> dict[str, Any]:
            return entry(lp.token, lp.logprob) | {"top_logprobs": [entry(t, v) for t, v in lp.top]}

        return {"content": [item(lp) for e in events for lp in e.logprobs]}

    async def _chat_stream(
        self, rid: str, body: ChatCompletionRequest, stream: RequestStream
    ) -> AsyncIterator[str]:
        def choice(event: GenerationEvent, finish: str | None) -> dict[str, Any]:
            delta = {"content": event.text} if event.text else {}
            c: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if body.logprobs and event.logprobs:
                c["logprobs"] = self._chat_logprobs([event])
            return c

        first = [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ]
        async for line in self._stream(rid, body, stream, "chat", "chat.completion.chunk", first, choice):
            yield line
