"""Resolve an s3:// model reference to a GGUF file in the local cache, downloading it once.

Three shapes, as SageMaker takes model data: a prefix (`s3://b/models/`, every object below it,
relative layout kept, like `S3DataType: S3Prefix` with `CompressionType: None`), a `model.tar.gz`
(downloaded then extracted), or a single object (`s3://b/m.gguf`).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from llmhost.store.cache import cache_root, file_lock, key_dir, listing_version, object_version
from llmhost.store.download import download_object
from llmhost.store.ranges import clean_etag, multipart_count
from llmhost.store.resolve import ModelNotFoundError, first_gguf
from llmhost.store.s3client import S3ModelError, head, list_prefix, make_client, part_size_of, translate
from llmhost.store.s3uri import S3Ref, parse_s3_ref
from llmhost.store.tarsafe import UnsafeArchiveError, safe_extract

log = logging.getLogger("llmhost.store")


def resolve_s3(uri: str) -> Path:
    try:
        ref = parse_s3_ref(uri)
    except ValueError as exc:
        raise S3ModelError(str(exc)) from None
    client, root = make_client(), cache_root()
    if ref.is_prefix:
        return _resolve_prefix(client, ref, root)
    if ref.is_archive:
        return _resolve_archive(client, ref, root)
    if ref.key.endswith(".gguf"):
        return _resolve_object(client, ref, root)
    # neither a .gguf nor an archive nor ending in "/": a prefix written without its slash
    return _resolve_prefix(client, S3Ref(ref.bucket, ref.key + "/"), root)


def model_in(directory: Path) -> Path:
    """The GGUF to serve: the first at the top (as /opt/ml/model), else the first one further down."""
    try:
        return first_gguf(directory)
    except ModelNotFoundError:
        nested = sorted(directory.rglob("*.gguf"), key=lambda p: (len(p.parts), str(p)))
        if not nested:
            raise
        return nested[0]


def _resolve_object(client: Any, ref: S3Ref, root: Path) -> Path:
    info = head(client, ref)
    size, etag = int(info["ContentLength"]), clean_etag(str(info["ETag"]))
    version_dir = key_dir(root, ref.bucket, ref.key) / object_version(etag, size)
    dest = version_dir / PurePosixPath(ref.key).name
    if dest.is_file() and dest.stat().st_size == size:
        return dest
    with file_lock(version_dir.with_name(version_dir.name + ".lock")):
        # another process may have finished it while this one waited for the lock
        if not (dest.is_file() and dest.stat().st_size == size):
            upload_part = part_size_of(client, ref, multipart_count(etag))
            download_object(client, ref, size, etag, dest, upload_part_size=upload_part)
    return dest


def _resolve_archive(client: Any, ref: S3Ref, root: Path) -> Path:
    archive = _resolve_object(client, ref, root)
    out = archive.parent / "extracted"
    if not out.is_dir():
        with file_lock(archive.parent / "extracted.lock"):
            if not out.is_dir():
                _extract(archive, out, ref)
    try:
        return model_in(out)
    except ModelNotFoundError:
        raise S3ModelError(f"{ref.uri}: the archive holds no *.gguf file") from None


def _extract(archive: Path, out: Path, ref: S3Ref) -> None:
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)  # an interrupted extraction is redone from the archive
    try:
        safe_extract(archive, staging)
    except UnsafeArchiveError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise S3ModelError(f"{ref.uri}: refused to extract: {exc}") from None
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise translate(exc, ref) from None
    os.replace(staging, out)


def _relative(ref: S3Ref, key: str) -> str:
    rel = key[len(ref.key):]
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or ".." in parts:
        raise S3ModelError(f"s3://{ref.bucket}/{key}: key would land outside the model directory")
    return rel


def _resolve_prefix(client: Any, ref: S3Ref, root: Path) -> Path:
    objects = list_prefix(client, ref)
    entries = [(_relative(ref, o["Key"]), clean_etag(str(o["ETag"])), int(o["Size"])) for o in objects]
    if not any(rel.endswith(".gguf") for rel, _, _ in entries):
        raise S3ModelError(f"{ref.uri}: no *.gguf object under prefix {ref.key!r} in bucket {ref.bucket!r}")
    final = key_dir(root, ref.bucket, ref.key) / listing_version(entries)
    if not final.is_dir():
        with file_lock(final.with_name(final.name + ".lock")):
            if not final.is_dir():
                _download_prefix(client, ref, entries, final)
    return model_in(final)


def _download_prefix(client: Any, ref: S3Ref, entries: list[tuple[str, str, int]], final: Path) -> None:
    # the staging directory survives an interruption: finished files are kept, partial ones resume
    staging = final.with_name(final.name + ".partial")
    for rel, etag, size in entries:
        dest = staging / rel
        if dest.is_file() and dest.stat().st_size == size:
            continue
        obj = S3Ref(ref.bucket, ref.key + rel)
        upload_part = part_size_of(client, obj, multipart_count(etag))
        download_object(client, obj, size, etag, dest, upload_part_size=upload_part)
    os.replace(staging, final)
