"""Which integrity check a downloaded S3 object gets, and making it.

In order: the ETag, when it can be recomputed (the MD5 of a single-part upload, or the MD5 of its part
MD5s when the part size is known), which it cannot be for SSE-KMS or SSE-C objects (their ETag is no
MD5) nor for stores that invent ETags; else S3's additional checksum when the object has one that can
be computed here (SHA-256, SHA-1, CRC32; a multipart upload's "composite" checksum is the checksum of
its parts' checksums); else the size alone (the recorded ranges covering the object exactly).
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from llmhost.store.ranges import clean_etag, etag_check, multipart_count, verify_etag

SIZE_ONLY = "size-only"
# the algorithms S3 offers; an object carries at most one
_ALGORITHMS = ("SHA256", "SHA1", "CRC32", "CRC32C", "CRC64NVME")
_PARTS_SUFFIX = re.compile(r"-(\d+)$")
_BLOCK = 1024 * 1024


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...

    def digest(self) -> bytes: ...


class _Crc32:
    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


# CRC32C and CRC64NVME need awscrt (not a dependency): such objects fall back to the size
_HASHES: dict[str, Callable[[], _Hasher]] = {"SHA256": hashlib.sha256, "SHA1": hashlib.sha1, "CRC32": _Crc32}


@dataclass(frozen=True, slots=True)
class Checksum:
    algorithm: str  # "SHA256", "CRC32", ...
    value: str  # base64 digest, any "-N" suffix removed
    composite: bool  # a multipart upload's checksum of its parts' checksums

    @property
    def computable(self) -> bool:
        return self.algorithm in _HASHES


def checksum_of(head: Mapping[str, Any], multipart: bool) -> Checksum | None:
    """The additional checksum a HEAD with ChecksumMode=ENABLED reported, if any.

    A multipart object's checksum is composite unless S3 says FULL_OBJECT: real S3 marks a composite
    value with "-N" and ChecksumType COMPOSITE; some S3-compatible servers say neither."""
    for algorithm in _ALGORITHMS:
        raw = head.get(f"Checksum{algorithm}")
        if not raw:
            continue
        value = str(raw)
        suffixed = _PARTS_SUFFIX.search(value) is not None
        kind = str(head.get("ChecksumType", "")).upper()
        composite = suffixed or kind == "COMPOSITE" or (multipart and kind != "FULL_OBJECT")
        return Checksum(algorithm, _PARTS_SUFFIX.sub("", value), composite)
    return None


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """An S3 object as its HEAD (with ChecksumMode=ENABLED) describes it."""

    size: int
    etag: str
    encrypted: bool = False  # SSE-KMS / SSE-C: the ETag is not an MD5 of the bytes
    checksum: Checksum | None = None
    upload_part_size: int | None = None  # of a multipart upload: from a HEAD of part 1

    @property
    def parts(self) -> int | None:
        return multipart_count(self.etag)


def info_from_head(head: Mapping[str, Any], upload_part_size: int | None = None) -> ObjectInfo:
    etag = clean_etag(str(head.get("ETag", "")))
    encrypted = str(head.get("ServerSideEncryption", "")).startswith("aws:kms") or bool(
        head.get("SSECustomerAlgorithm")
    )
    checksum = checksum_of(head, multipart_count(etag) is not None)
    return ObjectInfo(int(head["ContentLength"]), etag, encrypted, checksum, upload_part_size)


def planned_check(info: ObjectInfo) -> tuple[str, str]:
    """(the check `verify_file` will make, why no stronger one when it is size-only)."""
    if not info.encrypted:
        kind = etag_check(info.etag, info.upload_part_size)
        if kind != SIZE_ONLY:
            return kind, ""
    c = info.checksum
    if c is None:
        why = "encrypted (SSE-KMS/SSE-C) object" if info.encrypted else f"ETag {info.etag!r} not an MD5"
        return SIZE_ONLY, f"{why} and no S3 additional checksum"
    if not c.computable:
        return SIZE_ONLY, f"its {c.algorithm} checksum cannot be computed here"
    if c.composite and not info.upload_part_size:
        return SIZE_ONLY, f"its composite {c.algorithm} checksum needs the upload's part size, unknown"
    return c.algorithm.lower(), ""


def verify_file(path: Path, info: ObjectInfo) -> tuple[bool, str]:
    """(the file matches, the check made)."""
    kind, _ = planned_check(info)
    if kind in ("md5", "multipart"):
        return verify_etag(path, info.etag, info.upload_part_size)
    if kind == SIZE_ONLY:
        return True, kind  # the caller checked the size and the ranges
    c = info.checksum
    assert c is not None
    return file_checksum(path, c.algorithm, info.upload_part_size if c.composite else None) == c.value, kind


def _blocks(f: Any, length: int | None) -> Iterator[bytes]:
    left = length
    while left is None or left > 0:
        block = f.read(_BLOCK if left is None else min(_BLOCK, left))
        if not block:
            return
        if left is not None:
            left -= len(block)
        yield block


def file_checksum(path: Path, algorithm: str, part_size: int | None) -> str:
    """The base64 checksum S3 reports: of the whole file, or (part_size) of its parts' checksums."""
    make = _HASHES[algorithm]
    outer = make()
    with path.open("rb") as f:
        if part_size is None:
            for block in _blocks(f, None):
                outer.update(block)
            return base64.b64encode(outer.digest()).decode()
        while True:
            part, seen = make(), 0
            for block in _blocks(f, part_size):
                part.update(block)
                seen += len(block)
            if not seen:
                break
            outer.update(part.digest())
    return base64.b64encode(outer.digest()).decode()
