"""The local model cache: where an S3 object lands, and the lock that shares one download."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmhost.store.ranges import clean_etag

CACHE_ENV = "LLMHOST_CACHE"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "llmhost" / "models"


def _safe_segment(segment: str) -> str:
    # keys may hold any byte; keep the layout readable but never let a segment be "." or ".."
    cleaned = _UNSAFE.sub("_", segment)
    return cleaned if cleaned not in ("", ".", "..") else "_" + cleaned


def key_dir(root: Path, bucket: str, key: str) -> Path:
    """A directory per bucket/key; the key's "/" become directories so the cache stays browsable."""
    parts = [_safe_segment(p) for p in key.strip("/").split("/") if p] or ["_root"]
    return root.joinpath("s3", _safe_segment(bucket), *parts)


def object_version(etag: str, size: int) -> str:
    """One object version: a new upload under the same key changes its ETag (or size)."""
    return f"{clean_etag(etag)[:40]}-{size}"


def listing_version(objects: list[tuple[str, str, int]]) -> str:
    """A prefix's version: the digest of every (relative key, ETag, size) under it."""
    h = hashlib.sha256()
    for rel, etag, size in sorted(objects):
        h.update(f"{rel}\0{clean_etag(etag)}\0{size}\n".encode())
    return h.hexdigest()[:24]


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock: concurrent processes starting one model download it once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
