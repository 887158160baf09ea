"""Byte ranges of a parallel download and the integrity rules for S3 ETags."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PART_SIZE = 8 * 1024 * 1024
_PLAIN_MD5 = re.compile(r"^[0-9a-f]{32}$", re.IGNORECASE)
_MULTIPART = re.compile(r"^[0-9a-f]{32}-(\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class ByteRange:
    index: int
    start: int
    end: int  # inclusive, as in an HTTP Range header

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    @property
    def header(self) -> str:
        return f"bytes={self.start}-{self.end}"


def plan_ranges(size: int, part_size: int = DEFAULT_PART_SIZE) -> list[ByteRange]:
    """Split `size` bytes into consecutive ranges of `part_size` (the last one shorter)."""
    if part_size <= 0:
        raise ValueError("part_size must be positive")
    return [
        ByteRange(i, start, min(start + part_size, size) - 1)
        for i, start in enumerate(range(0, size, part_size))
    ]


def pending_ranges(ranges: Iterable[ByteRange], done: set[int]) -> list[ByteRange]:
    return [r for r in ranges if r.index not in done]


def clean_etag(etag: str) -> str:
    # case kept: other stores' ETags are opaque strings that If-Match must send back unchanged
    return etag.strip().strip('"')


def multipart_count(etag: str) -> int | None:
    m = _MULTIPART.match(clean_etag(etag))
    return int(m.group(1)) if m else None


def _md5_chunks(path: Path, chunk: int) -> Iterable[bytes]:
    with path.open("rb") as f:
        while block := f.read(chunk):
            yield hashlib.md5(block).digest()


def file_md5(path: Path) -> str:
    h = hashlib.md5()
    with path.open("rb") as f:
        while block := f.read(1024 * 1024):
            h.update(block)
    return h.hexdigest()


def multipart_etag(path: Path, part_size: int) -> str:
    """S3's ETag of a multipart upload: md5 of the concatenated part md5s, then "-<parts>"."""
    digests = list(_md5_chunks(path, part_size))
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


def etag_check(etag: str, part_size: int | None) -> str:
    """Which check `verify_etag` can make: "md5", "multipart" or "size-only".

    A plain 32-hex ETag is the object's MD5 only for single-part uploads without SSE-KMS; a
    "-N" ETag can be recomputed only when the upload's part size is known (`part_size`); any
    other form (stores that invent ETags) leaves the size as the only check. Whether the object is
    encrypted (SSE-KMS, SSE-C: a 32-hex ETag that is no MD5) only its HEAD says: see store.integrity.
    """
    e = clean_etag(etag)
    if _PLAIN_MD5.match(e):
        return "md5"
    if _MULTIPART.match(e) and part_size:
        return "multipart"
    return "size-only"


def verify_etag(path: Path, etag: str, part_size: int | None) -> tuple[bool, str]:
    """(matches, check used); a size-only check always matches here (the caller checked the size)."""
    kind = etag_check(etag, part_size)
    if kind == "md5":
        return file_md5(path) == clean_etag(etag).lower(), kind
    if kind == "multipart":
        assert part_size is not None
        return multipart_etag(path, part_size) == clean_etag(etag).lower(), kind
    return True, kind


def coverage_problem(ranges: list[ByteRange], done: set[int], size: int) -> str | None:
    """Why the ranges recorded as finished do not cover the object's `size` bytes exactly, or None:
    each range recorded, ranges back to back from byte 0 to the last, nothing recorded twice or extra."""
    missing = sorted(r.index for r in ranges if r.index not in done)
    if missing:
        return f"range(s) {missing[:8]} of {len(ranges)} never recorded as finished"
    extra = sorted(done - {r.index for r in ranges})
    if extra:
        return f"unknown range(s) {extra[:8]} recorded"
    position = 0
    for r in ranges:
        if r.start != position or r.end < r.start:
            return f"range {r.index} starts at byte {r.start}, expected {position}"
        position = r.end + 1
    if position != size:
        return f"ranges cover {position} bytes of {size}"
    return None
