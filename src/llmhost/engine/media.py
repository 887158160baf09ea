"""Images and audio in a prompt, as the engine carries them: the bytes a request sent (`MediaInput`),
what the projector made of them (`MediaSpan`: a run of KV positions filled by an embeddings decode,
not by token ids) and the ids those positions stand under in a prompt's token list.

A prompt with media is still one list of ints, so that the prefix cache, the host-memory tier and
the scheduler compare prompts as they always do: a span's positions take synthetic ids derived from
its medium's SHA-256 (negative, so never a vocabulary id). Two prompts holding the same image at the
same place share it as a prefix; different images differ at the span's first position. Bytes that
hash alike are the same medium, so a span's ids are equal only where its embeddings are."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from llmhost.errors import BadRequestError

MediaKind = Literal["image", "audio"]

# what stands for a medium in a rendered prompt: libmtmd's default marker (a projector with another
# has it put in its place)
MEDIA_MARKER = "<__media__>"

# the first bytes of each format libmtmd decodes (stb_image for images; miniaudio for audio): bytes
# that are none of these are refused before libmtmd sees them, which would otherwise hand them to
# ffprobe as a subprocess (its video support)
_IMAGE_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "png"),
    (b"\xff\xd8\xff", 0, "jpeg"),
    (b"GIF87a", 0, "gif"),
    (b"GIF89a", 0, "gif"),
    (b"BM", 0, "bmp"),
)
_AUDIO_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"fLaC", 0, "flac"),
    (b"ID3", 0, "mp3"),  # an MP3 starting with its ID3 tag
)

# synthetic ids: -1 - (the hash's first 62 bits + the position's index), modulo 2**62
_ID_SPACE = 1 << 62


class MediaError(BadRequestError, ValueError):
    """A medium that cannot be used (format, size, decoding), naming which one: `index` is its place
    among the request's media, in order."""

    status = 400

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def sniff(data: bytes) -> tuple[MediaKind, str] | None:
    """The kind and format of an encoded medium from its first bytes; None: none libmtmd decodes."""
    for magic, offset, name in _IMAGE_MAGIC:
        if data[offset : offset + len(magic)] == magic:
            return "image", name
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio", "wav"
    for magic, offset, name in _AUDIO_MAGIC:
        if data[offset : offset + len(magic)] == magic:
            return "audio", name
    if len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:  # an MPEG audio frame's sync
        return "audio", "mp3"
    return None


@dataclass(frozen=True, slots=True)
class MediaInput:
    """One medium of a request, as sent: its bytes, the kind its format is, their SHA-256 (hex)."""

    data: bytes
    kind: MediaKind
    sha256: str


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """The largest medium a request may send, once decoded: an image's pixels, a clip's seconds."""

    max_image_pixels: int = 0  # 0: no limit
    max_audio_seconds: float = 0.0


@dataclass(frozen=True, slots=True, eq=False)
class MediaSpan:
    """A medium's place in a prompt: KV positions [start, start + n_pos), filled by decoding its
    n_tokens embeddings (its encoder's output; the same count where positions are one per embedding).
    `chunk`: the projector's preprocessed input (an opaque handle, freed with the span)."""

    start: int
    n_pos: int
    n_tokens: int
    kind: MediaKind
    sha256: str
    chunk: Any = field(repr=False)

    @property
    def end(self) -> int:
        return self.start + self.n_pos


def media_ids(sha256: str, n_pos: int) -> list[int]:
    """The synthetic ids of a medium's `n_pos` positions (see the module's docstring)."""
    base = int(sha256[:16], 16) >> 2
    return [-1 - ((base + i) % _ID_SPACE) for i in range(n_pos)]


def kv_cells(n_positions: int, spans: tuple[MediaSpan, ...]) -> int:
    """The KV cells the first `n_positions` of a prompt fill, which is what its tokens count as (as
    llama-server counts them): under M-RoPE (Qwen2-VL's family) an image's embeddings share a few
    positions laid in 2D, so it fills more cells than it takes positions, and a sequence's stream must
    hold them all."""
    extra = sum(span.n_tokens - span.n_pos for span in spans if span.end <= n_positions)
    return n_positions + max(0, extra)


def text_ids(prompt: list[int]) -> list[int]:
    """A prompt's vocabulary ids, media positions left out (what repetition penalties look back on)."""
    return [t for t in prompt if t >= 0]


def media_floor(n: int, spans: tuple[MediaSpan, ...]) -> int:
    """The longest prefix of at most `n` positions that ends on no medium's inside: a medium is decoded
    whole (its embeddings attend to each other), so a cached prefix cut within one is cut back to its
    start."""
    for span in spans:
        if span.start < n < span.end:
            return span.start
    return n


def span_at(pos: int, spans: tuple[MediaSpan, ...]) -> MediaSpan | None:
    """The medium starting at `pos`, if one does."""
    for span in spans:
        if span.start == pos:
            return span
    return None


def next_span_start(pos: int, spans: tuple[MediaSpan, ...]) -> int | None:
    """Where the first medium after `pos` starts, if one does."""
    starts = [s.start for s in spans if s.start > pos]
    return min(starts) if starts else None
