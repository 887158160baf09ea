from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from llmhost.server.protocol.openai import (
    AudioText,
    AudioTextForm,
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
    ModelMeta,
)
from llmhost.server.protocol.outputs import ChatCompletionResponse, CompletionResponse
from llmhost.server.routes import deps
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.apidoc import COMMON, NAMED, operation

router = APIRouter()


TOKEN_LIMITS = (
    "Token limits of this server (--max-input-tokens, --max-total-tokens) are not in the schema: "
    "a prompt or max_tokens over them is a 422 naming the field and the limit."
)


@router.post(
    "/v1/completions",
    openapi_extra=operation(
        "OpenAI completions",
        body=[CompletionRequest],
        success=CompletionResponse,
        stream=True,
        errors=NAMED,
        description=TOKEN_LIMITS,
    ),
)
async def completions(request: Request) -> Response:
    body = CompletionRequest.model_validate(await deps.json_body(request))
    return await deps.openai(request).completion(body, request)


@router.post(
    "/v1/chat/completions",
    openapi_extra=operation(
        "OpenAI chat completions",
        body=[ChatCompletionRequest],
        success=ChatCompletionResponse,
        stream=True,
        errors=NAMED,
        description=TOKEN_LIMITS,
    ),
)
async def chat_completions(request: Request) -> Response:
    body = ChatCompletionRequest.model_validate(await deps.json_body(request))
    return await deps.openai(request).chat(body, request)


AUDIO = (
    "A multipart form: `file` (WAV, MP3 or FLAC, at most --max-media-bytes, else a 413 naming it; at most "
    "--max-audio-seconds), `model`, and optional `prompt`, `response_format` (json, text, verbose_json), "
    "`temperature` (0 to 1, default 0); a transcription also takes `language` and `stream` (true: "
    "`transcript.text.delta` events as the text comes, then `transcript.text.done` with the text and usage; "
    "json or text, not verbose_json). The clip and an instruction are one user turn of the chat template, "
    "answered as a chat completion. A model without an audio projector (--mmproj) is a 400 naming `file`."
)


def audio_operation(summary: str, stream: bool) -> JSONObject:
    return operation(
        summary,
        body=[AudioTextForm],
        body_media=["multipart/form-data"],
        json_body=False,
        success=AudioText,
        stream=stream,
        errors=NAMED,
        description=AUDIO,
    )


@router.post("/v1/audio/transcriptions", openapi_extra=audio_operation("OpenAI: transcribe audio", True))
async def transcriptions(request: Request) -> Response:
    return await deps.audio_text(request).answer("transcribe", request)


@router.post(
    "/v1/audio/translations", openapi_extra=audio_operation("OpenAI: translate audio into English", False)
)
async def translations(request: Request) -> Response:
    return await deps.audio_text(request).answer("translate", request)


@router.get(
    "/v1/models",
    openapi_extra=operation("The served model and its LoRA adapters", success=ModelList, errors=COMMON),
)
async def models(request: Request) -> ModelList:
    ctx = deps.context(request)
    meta = None
    if ctx.model.ready:
        info = ctx.model.info
        meta = ModelMeta(
            n_ctx_train=info.n_ctx_train,
            n_vocab=info.n_vocab,
            n_params=info.n_params,
            size=info.size_bytes,
            description=info.description,
        )
    base, does = ctx.settings.model_name, ctx.capabilities() + ctx.input_capabilities()
    generates = [c for c in does if c != "embedding"]  # an adapter's: embeddings come from the base alone
    adapters = [
        ModelCard(id=s.name, created=ctx.started_at, parent=base, capabilities=generates)
        for s in ctx.adapters.specs
    ]
    card = ModelCard(id=base, created=ctx.started_at, meta=meta, capabilities=does)
    return ModelList(data=[card, *adapters])
