"""A batch's input read from, and its output written to, s3:// (or local paths, as they are)."""

from __future__ import annotations

from pathlib import Path

from llmhost.store.s3client import make_client
from llmhost.store.s3uri import is_s3_ref, parse_s3_ref


def fetch(location: str, into: Path) -> Path:
    """The input as a local file: `location` itself, or the s3:// object downloaded into `into`."""
    if not is_s3_ref(location):
        return Path(location)
    ref = parse_s3_ref(location)
    if ref.is_prefix:
        raise ValueError(f"{location}: an input is one object, not a prefix")
    local = into / Path(ref.key).name
    make_client(ref).download_file(ref.bucket, ref.key, str(local))
    return local


def publish(local: Path, location: str) -> None:
    """The finished output at `location`: moved there, or uploaded to the s3:// key."""
    if not is_s3_ref(location):
        Path(location).parent.mkdir(parents=True, exist_ok=True)
        local.replace(location)
        return
    ref = parse_s3_ref(location)
    if ref.is_prefix:
        raise ValueError(f"{location}: an output is one object, not a prefix")
    make_client(ref).upload_file(str(local), ref.bucket, ref.key)
