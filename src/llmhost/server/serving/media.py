"""The images and audio of a chat request, read from its content parts and checked before the model's
projector sees them: inline bytes only (a `data:` URI, base64 audio), no fetch of a remote URL (a
server that fetched what a request names would be a door into the network it runs in), at most
--max-media-bytes each, a format libmtmd decodes by their magic bytes. Each refusal is a 400 naming
the part's field."""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from llmhost.engine.media import MediaInput, MediaKind, sniff
from llmhost.server.protocol.openai import AudioPart, ChatCompletionRequest, ImagePart
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


def chat_media(body: ChatCompletionRequest, max_bytes: int) -> ChatMedia:
    """The media of `body`'s messages, in the order their markers appear in the rendered prompt."""
    inputs: list[MediaInput] = []
    fields: list[str] = []
    for i, message in enumerate(body.messages):
        if not isinstance(message.content, list):
            continue
        for j, part in enumerate(message.content):
            if isinstance(part, ImagePart):
                field = f"messages[{i}].content[{j}].image_url.url"
                inputs.append(_checked(_image_bytes(part.image_url.url, field), "image", field, max_bytes))
            elif isinstance(part, AudioPart):
                field = f"messages[{i}].content[{j}].input_audio.data"
                inputs.append(_checked(_base64(part.input_audio.data, field), "audio", field, max_bytes))
            else:
                continue
            fields.append(field)
    return ChatMedia(inputs, fields)


def base64_media(items: list[tuple[str, str]], max_bytes: int) -> ChatMedia:
    """Media sent as bare base64 (Ollama's `images`, llama-server's `multimodal_data`), in order: each is
    an image or audio by its magic bytes, as those APIs take both in one list. `items`: (field, base64)."""
    inputs = [_checked(_base64(text, field), None, field, max_bytes) for field, text in items]
    return ChatMedia(inputs, [field for field, _ in items])


def _image_bytes(url: str, field: str) -> bytes:
    """The bytes of an image URL: a `data:` URI's; a remote URL is refused, not fetched."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https"):
        raise APIError(
            400,
            "remote image URLs are not fetched by this server; send the image inline as a data: URI "
            "(data:image/png;base64,...)",
            field=field,
        )
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
        raise APIError(
            400,
            f"the {kind or 'medium'} is {len(data)} bytes, more than --max-media-bytes {max_bytes}",
            field=field,
            extra={"limit": max_bytes},
        )
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
