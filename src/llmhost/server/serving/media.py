"""The images and audio of a chat request, read from its content parts and checked before the model's
projector sees them: inline bytes (a `data:` URI, base64 audio), or an image URL on a host or under a
folder the operator allows (media_sources.py; no other remote URL is fetched), at most
--max-media-bytes each, a format libmtmd decodes by their magic bytes. Each refusal is a 400 naming
the part's field."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from llmhost.engine.media import MediaInput, MediaKind, sniff
from llmhost.server.protocol.openai import AudioPart, ChatCompletionRequest, ImagePart
from llmhost.server.serving.media_sources import MediaSources, fetch, read_file, too_large
from llmhost.web.errors import APIError

IMAGE_FORMATS = "PNG, JPEG, GIF or BMP"
AUDIO_FORMATS = "WAV, MP3 or FLAC"


@dataclass(frozen=True, slots=True)
class ChatMedia:
    """A request's media in prompt order, and the field each came from (what a refusal names)."""

    inputs: list[MediaInput]
    fields: list[str]

    def __bool__(self) -> bool:
        return bool(self.inputs)


# a request's media as its own API reads and names them, given what the operator allows (called once
# the server has room for the request: a 429 comes before any decoding)
MediaReader = Callable[[MediaSources], Awaitable[ChatMedia]]


async def chat_media(body: ChatCompletionRequest, sources: MediaSources) -> ChatMedia:
    """The media of `body`'s messages, in the order their markers appear in the rendered prompt."""
    max_bytes = sources.max_bytes
    inputs: list[MediaInput] = []
    fields: list[str] = []
    for i, message in enumerate(body.messages):
        if not isinstance(message.content, list):
            continue
        for j, part in enumerate(message.content):
            if isinstance(part, ImagePart):
                field = f"messages[{i}].content[{j}].image_url.url"
                inputs.append(await image_from_url(part.image_url.url, field, sources))
            elif isinstance(part, AudioPart):
                field = f"messages[{i}].content[{j}].input_audio.data"
                inputs.append(_checked(_base64(part.input_audio.data, field), "audio", field, max_bytes))
            else:
                continue
            fields.append(field)
    return ChatMedia(inputs, fields)


async def image_from_url(url: str, field: str, sources: MediaSources) -> MediaInput:
    """The image of an image URL (a `data:` URI, a listed host's, a file's under --media-path; any
    other is refused), checked; `field` names it."""
    return _checked(await _image_bytes(url, field, sources), "image", field, sources.max_bytes)


def image_from_base64(data: str, field: str, max_bytes: int) -> MediaInput:
    """The image of bare base64 text (Anthropic's `source.data`), checked; `field` names it."""
    return _checked(_base64(data, field), "image", field, max_bytes)


def base64_media(items: list[tuple[str, str]], max_bytes: int) -> ChatMedia:
    """Media sent as bare base64 (Ollama's `images`, llama-server's `multimodal_data`), in order: each is
    an image or audio by its magic bytes, as those APIs take both in one list. `items`: (field, base64)."""
    inputs = [_checked(_base64(text, field), None, field, max_bytes) for field, text in items]
    return ChatMedia(inputs, [field for field, _ in items])


def given(media: ChatMedia) -> MediaReader:
    """A reader of media an API read before rendering (Ollama's images, whose places it checks first)."""

    async def read(_: MediaSources) -> ChatMedia:
        return media

    return read


async def _image_bytes(url: str, field: str, sources: MediaSources) -> bytes:
    """The bytes of an image URL: a `data:` URI's, a listed host's, a file's under --media-path."""

    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https"):
        return await fetch(url, field, sources)
    if scheme == "file":
        return await read_file(url, field, sources)
    if scheme != "data":
        raise APIError(400, "an image URL must be a data: URI (data:image/png;base64,...)", field=field)
    header, sep, payload = url[5:].partition(",")
    if not sep or not header.lower().endswith(";base64"):
        raise APIError(400, "a data: URI of an image must be base64 (data:image/png;base64,...)", field=field)
    return _base64(payload, field)


def _base64(text: str, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise APIError(400, "not valid base64", field=field) from None


def _checked(data: bytes, kind: MediaKind | None, field: str, max_bytes: int) -> MediaInput:
    """`data` as a medium of `kind` (None: either, as its bytes say), if it is one of the formats
    libmtmd decodes and within the limit."""
    if len(data) > max_bytes:
        raise too_large(len(data), kind or "medium", field, max_bytes)
    found = sniff(data)
    if found is None and kind is None:
        raise APIError(
            400, f"the bytes are of no image or audio format ({IMAGE_FORMATS}; {AUDIO_FORMATS})", field=field
        )
    if kind is None and found is not None:
        kind = found[0]
    if found is None or found[0] != kind:
        formats = IMAGE_FORMATS if kind == "image" else AUDIO_FORMATS
        what = "of no image or audio format" if found is None else f"{found[1]}, not {kind}"
        raise APIError(400, f"the bytes are {what} ({kind} is taken as {formats})", field=field)
    return MediaInput(data, kind, hashlib.sha256(data).hexdigest())
