"""OpenAI's /v1/audio/transcriptions and /v1/audio/translations over the chat path, as llama-server
serves them: the uploaded clip and an instruction become one user turn of the model's chat template,
so the clip is checked by ChatMedia (--max-media-bytes, formats, --max-audio-seconds) and batched,
cached and limited as any chat request. A model whose projector does not hear is a 400. A transcription
streams (`stream=true`, OpenAI's `transcript.text.*` events); a translation does not, as OpenAI's."""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Literal

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from llmhost.engine import GenerationEvent
from llmhost.server import limit_fields
from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.server.serving.apis.transcript_events import transcript_events, usage
from llmhost.server.serving.chat import ChatRun, StreamedOutput, read_message, start_chat
from llmhost.server.serving.context import EventStreamResponse, ServingContext, new_id, raise_if_failed
from llmhost.web.errors import APIError

Task = Literal["transcribe", "translate"]
FORMATS = ("json", "text", "verbose_json")
# the fields of OpenAI's form this route reads; any other is refused rather than ignored
FIELDS = frozenset({"file", "model", "language", "prompt", "response_format", "temperature", "stream"})


@dataclass(frozen=True, slots=True)
class AudioRequest:
    """A transcription or translation form, read and checked."""

    task: Task
    audio: bytes
    model: str
    language: str | None
    prompt: str | None
    response_format: str
    temperature: float
    stream: bool


def instruction(task: Task, language: str | None, prompt: str | None) -> str:
    """What the model is asked to do with the clip: llama-server's words for a transcription
    (`prompt`: the client's context, e.g. spellings, after them)."""
    if task == "translate":
        text = "Translate audio to English text"
    elif language:
        text = f"Transcribe audio to text (language: {language})"
    else:
        text = "Transcribe audio to text"
    return f"{text}\n{prompt}" if prompt else text


def chat_body(req: AudioRequest) -> ChatCompletionRequest:
    """The chat request that asks for `req`: the instruction, then the clip, in one user turn (as
    llama-server renders it: `Transcribe audio to text<__media__>`)."""
    clip = {"data": base64.b64encode(req.audio).decode(), "format": "wav"}  # ChatMedia sniffs the bytes
    content = [
        {"type": "text", "text": instruction(req.task, req.language, req.prompt)},
        {"type": "input_audio", "input_audio": clip},
    ]
    messages = [{"role": "user", "content": content}]
    return ChatCompletionRequest.model_validate(
        {"model": req.model, "messages": messages, "temperature": req.temperature}
    )


def clip_seconds(data: bytes) -> float | None:
    """A WAV clip's length from its header; None for the compressed formats (MP3, FLAC)."""
    try:
        with wave.open(io.BytesIO(data)) as clip:
            frames: int = clip.getnframes()
            rate: int = clip.getframerate()
    except (wave.Error, EOFError):
        return None
    return frames / rate if rate else None


async def read_form(task: Task, form: FormData, max_bytes: int) -> AudioRequest:
    """The form's fields, each a 400 naming it when missing or malformed."""
    unknown = sorted(set(form.keys()) - FIELDS)
    if unknown:
        raise APIError(400, f"unknown field {unknown[0]!r}", field=unknown[0])
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise APIError(400, "missing required parameter: 'file' (the audio clip)", field="file")
    model = _text(form, "model")
    if model is None:
        raise APIError(400, "missing required parameter: 'model'", field="model")
    audio = await upload.read(max_bytes + 1)
    if len(audio) > max_bytes:
        raise APIError(
            413,
            f"the audio is more than --max-media-bytes {max_bytes} bytes",
            field="file",
            extra={"limit": max_bytes},
        )
    response_format = _text(form, "response_format") or "json"
    if response_format not in FORMATS:
        raise APIError(
            400,
            f"response_format {response_format!r} is not supported; use one of {', '.join(FORMATS)} "
            "(srt and vtt need timestamps, which a chat model does not give)",
            field="response_format",
        )
    stream = _stream(form, task, response_format)
    language = _text(form, "language")
    if task == "translate" and language is not None:
        raise APIError(400, "a translation takes no language: it is always into English", field="language")
    return AudioRequest(
        task, audio, model, language, _text(form, "prompt"), response_format, _temperature(form), stream
    )


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    if value is not None and not isinstance(value, str):
        raise APIError(400, f"{name} must be a text field, not a file", field=name)
    return value


def _stream(form: FormData, task: Task, response_format: str) -> bool:
    """`stream`, "true" or "false"; as OpenAI's, only a transcription streams, and only its text (json or
    text: the events are the same), never verbose_json's segments."""
    raw = _text(form, "stream")
    if raw not in (None, "true", "false"):
        raise APIError(400, f"stream must be true or false, not {raw!r}", field="stream")
    if raw != "true":
        return False
    if task == "translate":
        raise APIError(400, "a translation does not stream; leave stream out or false", field="stream")
    if response_format == "verbose_json":
        raise APIError(
            400,
            "response_format verbose_json does not stream; use json or text with stream=true",
            field="response_format",
        )
    return True


def _temperature(form: FormData) -> float:
    raw = _text(form, "temperature")
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise APIError(400, "temperature must be a number from 0 to 1", field="temperature") from None
    if not 0.0 <= value <= 1.0:
        raise APIError(400, "temperature must be a number from 0 to 1", field="temperature")
    return value


class AudioTextServing:
    """Transcriptions and translations of one served model (`tool_parser`: the chat path's setting)."""

    def __init__(self, ctx: ServingContext, tool_parser: str = "auto") -> None:
        self.ctx = ctx
        self.tool_parser = tool_parser

    async def answer(self, task: Task, request: Request) -> Response:
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise APIError(400, "the audio is uploaded as multipart/form-data", field="file")
        form = await request.form(max_files=1, max_fields=8)
        try:
            req = await read_form(task, form, self.ctx.settings.max_media_bytes)
        finally:
            await form.close()
        if "audio" not in self.ctx.input_capabilities():
            raise APIError(
                400,
                "this model does not hear audio: the server needs --mmproj with an audio projector",
                field="file",
            )
        run = await self._start(req)
        if req.stream:
            return EventStreamResponse(self._events(run), run.streams)
        text, last = await self._generate(run, request)
        return self._shaped(req, text, last)

    async def _start(self, req: AudioRequest) -> ChatRun:
        rid = new_id("audio")
        try:
            return await start_chat(self.ctx, chat_body(req), None, rid, limit_fields.CHAT, self.tool_parser)
        except APIError as exc:  # ChatMedia names the chat part the clip became: name the form's field
            if exc.field and exc.field.endswith("input_audio.data"):
                exc.field = "file"
            raise

    def _events(self, run: ChatRun) -> AsyncIterator[str]:
        output = StreamedOutput(run.plan)

        def answer_of(event: GenerationEvent) -> str:
            _, text, _ = output.feed(event.text, event.finished)
            return text

        return transcript_events(run.streams[0], answer_of, partial(self.ctx.finished, "audio"))

    async def _generate(self, run: ChatRun, request: Request) -> tuple[str, GenerationEvent]:
        (events,) = await self.ctx.collect_all(run.streams, request)
        raise_if_failed(events[-1])
        self.ctx.finished("audio", events[-1])
        text = read_message(run.plan, "".join(e.text for e in events)).content or ""
        return text.strip(), events[-1]

    @staticmethod
    def _shaped(req: AudioRequest, text: str, last: GenerationEvent) -> Response:
        if req.response_format == "text":
            return PlainTextResponse(text)
        if req.response_format == "json":
            return JSONResponse({"text": text, "usage": usage(last)})
        duration = clip_seconds(req.audio)
        language = "english" if req.task == "translate" else req.language
        # the model gives no timestamps: one segment spans the whole clip
        segment = {"id": 0, "seek": 0, "start": 0.0, "end": duration, "text": text}
        body = {
            "task": "translate" if req.task == "translate" else "transcribe",
            "language": language,
            "duration": duration,
            "text": text,
            "segments": [segment],
        }
        return JSONResponse(body)
