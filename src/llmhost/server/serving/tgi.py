"""Text Generation Inference's /generate and /generate_stream over the engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from llmhost.engine import GenerationEvent, SamplingParams
from llmhost.engine.loop import RequestStream
from llmhost.server.protocol.tgi import TGIParameters, TGIRequest
from llmhost.server.serving.context import (
    EventStreamResponse,
    ServingContext,
    build_params,
    new_id,
    raise_if_failed,
    sse,
)


def tgi_error_event(message: str) -> str:
    return sse({"error": message, "error_type": "generation"}, prefix="data:")


def sampling_params(p: TGIParameters, max_new_tokens: int) -> SamplingParams:
    sampling = p.sampling
    return build_params(
        max_tokens=max_new_tokens,
        temperature=(p.temperature or 1.0) if sampling else 0.0,
        top_k=p.top_k or 0,
        top_p=p.top_p or 1.0,
        repetition_penalty=p.repetition_penalty or 1.0,
        frequency_penalty=p.frequency_penalty or 0.0,
        seed=p.seed,
        stop=list(p.stop),
        # TGI reports a logprob per token in details and in streamed tokens
        logprobs=(p.top_n_tokens or 0) if p.details else None,
    )


class TGIServing:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx

    async def _start(self, body: TGIRequest) -> tuple[RequestStream, list[int]]:
        ctx = self.ctx
        prompt = await ctx.prompt_tokens(body.inputs)
        default = min(ctx.settings.default_max_new_tokens, ctx.remaining(len(prompt)))
        max_new = body.parameters.max_new_tokens or default
        return ctx.submit(new_id("tgi"), prompt, sampling_params(body.parameters, max_new), "tgi"), prompt

    def _token(self, token: int, text: str, logprob: float | None) -> dict[str, Any]:
        return {
            "id": token,
            "text": text,
            "logprob": logprob,
            "special": token >= 0 and self.ctx.engine.is_special(token),
        }

    def _details(self, body: TGIRequest, events: list[GenerationEvent], full: bool) -> dict[str, Any]:
        last = events[-1]
        details: dict[str, Any] = {
            "finish_reason": last.finish_reason.value if last.finish_reason else None,
            "generated_tokens": last.completion_tokens,
            "seed": body.parameters.seed,
        }
        if full:
            details["prefill"] = []
            details["tokens"] = [
                self._token(lp.token, self.ctx.engine.token_text(lp.token), lp.logprob)
                for e in events
                for lp in e.logprobs
            ]
        if last.timings is not None:
            details["timings"] = last.timings.as_dict()
        return details

    async def generate(self, body: TGIRequest, request: Request) -> dict[str, Any]:
        stream, _ = await self._start(body)
        events = await self.ctx.collect(stream, request)
        last = events[-1]
        raise_if_failed(last)
        self.ctx.finished("tgi", last)
        text = "".join(e.text for e in events)
        out: dict[str, Any] = {
            "generated_text": (body.inputs + text) if body.parameters.return_full_text else text
        }
        if body.parameters.details:
            out["details"] = self._details(body, events, full=True)
        return out

    async def generate_stream(self, body: TGIRequest) -> StreamingResponse:
        stream, _ = await self._start(body)
        return EventStreamResponse(self._stream(body, stream), stream, tgi_error_event)

    async def _stream(self, body: TGIRequest, stream: RequestStream) -> AsyncIterator[str]:
        pieces: list[str] = []
        index = 0
        async for event in stream:
            if event.error is not None:
                yield tgi_error_event(event.error)
                return
            pieces.append(event.text)
            token_ids = event.token_ids or [-1]
            for i, token in enumerate(token_ids):
                lp = event.logprobs[i].logprob if i < len(event.logprobs) else None
                index += 1
                msg: dict[str, Any] = {
                    "index": index,
                    "token": self._token(token, event.text if i == len(token_ids) - 1 else "", lp),
                    "top_tokens": None,
                    "generated_text": None,
                    "details": None,
                }
                if event.finished and i == len(token_ids) - 1:
                    text = "".join(pieces)
                    msg["generated_text"] = (body.inputs + text) if body.parameters.return_full_text else text
                    if body.parameters.details:
                        msg["details"] = self._details(body, [event], full=False)
                    self.ctx.finished("tgi", event)
                yield sse(msg, prefix="data:")
