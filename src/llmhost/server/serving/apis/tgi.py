"""Text Generation Inference's generate, generate_stream and /info over the engine."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from llmhost import __version__
from llmhost.engine import GenerationEvent, SamplingParams, TokenLogprob
from llmhost.engine.media import MediaSpan
from llmhost.engine.stream import RequestStream
from llmhost.server import limit_fields
from llmhost.server.protocol.limits import MAX_STOP_SEQUENCES
from llmhost.server.protocol.outputs import Generation, Info
from llmhost.server.protocol.shapes import PrefillToken, StreamedToken, TGIDetails, TGIToken
from llmhost.server.protocol.tgi import MAX_TOP_N_TOKENS, TGIParameters, TGIRequest
from llmhost.server.serving.context import (
    EventStreamResponse,
    ServingContext,
    build_params,
    new_id,
    raise_if_failed,
    sse,
)
from llmhost.server.serving.media import base64_media
from llmhost.server.serving.structured import tgi_constraint
from llmhost.web.errors import APIError


def tgi_error_event(message: str) -> str:
    return sse({"error": message, "error_type": "generation"}, prefix="data:")


def sampling_params(p: TGIParameters, max_new_tokens: int) -> SamplingParams:
    sampling = p.sampling
    wants_logprobs = p.details or p.decoder_input_details or bool(p.top_n_tokens)
    return build_params(
        max_tokens=max_new_tokens,
        temperature=(p.temperature or 1.0) if sampling else 0.0,
        top_k=p.top_k or 0,
        top_p=p.top_p or 1.0,
        typical_p=p.typical_p or 1.0,
        repetition_penalty=p.repetition_penalty or 1.0,
        frequency_penalty=p.frequency_penalty or 0.0,
        seed=p.seed,
        stop=list(p.stop),
        # TGI reports a logprob per token in details and in streamed tokens, `top_n_tokens` alternatives
        logprobs=(p.top_n_tokens or 0) if wants_logprobs else None,
        prompt_logprobs=p.decoder_input_details,
        constraint=tgi_constraint(p.grammar.type, p.grammar.value) if p.grammar else None,
    )


class TGIServing:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx

    def info(self) -> Info:
        """TGI's GET /info: the model and the limits the router enforces."""
        ctx = self.ctx
        engine = ctx.settings.engine
        return Info(
            model_id=ctx.settings.model_name,
            model_sha=None,
            model_pipeline_tag="text-generation",
            model_dtype="gguf",
            model_device_type="cpu",
            max_concurrent_requests=engine.max_concurrent + engine.max_queue,
            max_best_of=1,
            max_stop_sequences=MAX_STOP_SEQUENCES,
            max_input_tokens=engine.max_input_tokens,
            max_input_length=engine.max_input_tokens,
            max_total_tokens=engine.max_total_tokens,
            max_batch_total_tokens=engine.max_batch_tokens,
            max_batch_size=engine.max_concurrent,
            max_client_batch_size=1,
            max_top_n_tokens=MAX_TOP_N_TOKENS,
            waiting_served_ratio=None,
            max_waiting_tokens=None,
            validation_workers=1,
            router="llmhost",
            version=__version__,
            sha=None,
            docker_label=None,
        )

    async def _start(self, body: TGIRequest, stream: bool) -> tuple[RequestStream, list[int]]:
        ctx = self.ctx
        p = body.parameters
        if stream and p.decoder_input_details:
            raise APIError(
                422,
                "decoder_input_details is not supported when streaming",
                field="parameters.decoder_input_details",
            )
        params = sampling_params(p, 1)  # validates before tokenizing; max_new_tokens set below
        adapters = ctx.adapters.by_id(p.adapter_id)
        await ctx.check_constraint(params.constraint)
        prompt, spans = await self._prompt(body)
        if p.truncate is not None and len(prompt) > p.truncate:
            if spans:  # the media's places count from the prompt's start: the cut would move them
                raise APIError(
                    422,
                    f"the prompt with its media is {len(prompt)} tokens: truncate {p.truncate} would cut it",
                    field="parameters.truncate",
                )
            prompt = prompt[-p.truncate :]  # TGI keeps the end of the input
        params.max_tokens = p.max_new_tokens or min(
            ctx.settings.default_max_new_tokens, ctx.remaining(len(prompt))
        )
        rid = new_id("tgi")
        return ctx.submit(rid, prompt, params, limit_fields.TGI, adapters=adapters, media=spans), prompt

    async def _prompt(self, body: TGIRequest) -> tuple[list[int], tuple[MediaSpan, ...]]:
        """The prompt's tokens, and the places of its media (llama-server's `multimodal_data`)."""
        media = base64_media(body.media, self.ctx.settings.max_media_bytes)
        if not media:
            return await self.ctx.prompt_tokens(body.text), ()
        if body.parameters.decoder_input_details:
            raise APIError(
                422,
                "decoder_input_details (the prompt's logprobs) is not given for a prompt with media",
                field="parameters.decoder_input_details",
            )
        return await self.ctx.media_prompt(body.text, media, "inputs.multimodal_data")

    def _token(self, lp: TokenLogprob | None, token: int, text: str | None = None) -> TGIToken:
        return {
            "id": token,
            "text": self.ctx.engine.token_text(token) if text is None else text,
            "logprob": lp.logprob if lp is not None else None,
            "special": token >= 0 and self.ctx.engine.is_special(token),
        }

    def _top(self, lp: TokenLogprob) -> list[TGIToken]:
        return [self._token(TokenLogprob(t, v, ()), t) for t, v in lp.top]

    def _prefill(self, events: list[GenerationEvent], prompt: list[int]) -> list[PrefillToken]:
        lps = [lp for e in events for lp in e.prompt_logprobs]
        if not lps:
            return []
        text = self.ctx.engine.token_text
        first: PrefillToken = {"id": prompt[0], "text": text(prompt[0]), "logprob": None}
        return [first] + [{"id": lp.token, "text": text(lp.token), "logprob": lp.logprob} for lp in lps]

    def _details(
        self, body: TGIRequest, events: list[GenerationEvent], prompt: list[int] | None = None
    ) -> TGIDetails:
        last = events[-1]
        p = body.parameters
        details: TGIDetails = {
            "finish_reason": last.finish_reason.value if last.finish_reason else None,
            "generated_tokens": last.completion_tokens,
            "seed": p.seed,
        }
        if prompt is not None:  # the full details of a generate call
            lps = [lp for e in events for lp in e.logprobs]
            details["prefill"] = self._prefill(events, prompt)
            details["tokens"] = [self._token(lp, lp.token) for lp in lps]
            if p.top_n_tokens:
                details["top_tokens"] = [self._top(lp) for lp in lps]
        if last.timings is not None:
            details["timings"] = last.timings.as_dict()
        return details

    async def generate(self, body: TGIRequest, request: Request) -> Generation:
        stream, prompt = await self._start(body, stream=False)
        events = await self.ctx.collect(stream, request)
        last = events[-1]
        raise_if_failed(last)
        self.ctx.finished("tgi", last)
        text = "".join(e.text for e in events)
        out = Generation(generated_text=(body.text + text) if body.parameters.return_full_text else text)
        if body.parameters.details:
            out.details = self._details(body, events, prompt)
            out.details["best_of_sequences"] = None
        return out

    async def generate_stream(self, body: TGIRequest) -> StreamingResponse:
        stream, _ = await self._start(body, stream=True)
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
                lp = event.logprobs[i] if i < len(event.logprobs) else None
                index += 1
                last = i == len(token_ids) - 1
                msg: StreamedToken = {
                    "index": index,
                    "token": self._token(lp, token, event.text if last else ""),
                    "top_tokens": self._top(lp) if lp is not None and body.parameters.top_n_tokens else None,
                    "generated_text": None,
                    "details": None,
                }
                if event.finished and last:
                    text = "".join(pieces)
                    msg["generated_text"] = (body.text + text) if body.parameters.return_full_text else text
                    if body.parameters.details:
                        msg["details"] = self._details(body, [event])
                    self.ctx.finished("tgi", event)
                yield sse(msg, prefix="data:")
