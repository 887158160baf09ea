"""Resolve an s3:// model reference to a model in the local cache, downloading it once.

Three shapes, as SageMaker takes model data: a prefix (`s3://b/models/`, every object below it,
relative layout kept, like `S3DataType: S3Prefix` with `CompressionType: None`), a `model.tar.gz`
(downloaded, extracted, then deleted: the extracted directory is the model), or a single object
(`s3://b/m.gguf`). A prefix and an archive are model directories (code/inference.py is looked for at
their root); a single object is a file alone.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from llmhost.store.cache import cache_root, file_lock, key_dir, listing_version, object_version
from llmhost.store.download import download_object
from llmhost.store.model import ModelNotFoundError, ResolvedModel, in_directory
from llmhost.store.ranges import clean_etag
from llmhost.store.s3client import S3ModelError, describe, head, list_prefix, make_client, translate
from llmhost.store.s3uri import S3Ref, parse_s3_ref
from llmhost.store.tarsafe import UnsafeArchiveError, safe_extract

log = logging.getLogger("llmhost.store")
EXTRACTED = "extracted"


def resolve_s3(uri: str) -> ResolvedModel:
    try:
        ref = parse_s3_ref(uri)
    except ValueError as exc:
        raise S3ModelError(str(exc)) from None
    try:
        client, root = make_client(ref), cache_root()
        if ref.is_prefix:
            return _resolve_prefix(client, ref, root)
        if ref.is_archive:
            return _resolve_archive(client, ref, root)
        if ref.key.endswith(".gguf"):
            return ResolvedModel(_resolve_object(client, ref, root))
        # neither a .gguf nor an archive nor ending in "/": a prefix written without its slash
        return _resolve_prefix(client, S3Ref(ref.bucket, ref.key + "/"), root)
    except S3ModelError:
        raise
    except OSError as exc:  # the cache: its directories, lock files, renames, a full disk
        raise translate(exc, ref) from None


def _version_dir(client: Any, ref: S3Ref, root: Path) -> tuple[Path, dict[str, Any]]:
    """Where this version of the object is cached (named after its ETag and size), and its HEAD."""
    info = head(client, ref)
    size, etag = int(info["ContentLength"]), clean_etag(str(info["ETag"]))
    return key_dir(root, ref.bucket, ref.key) / object_version(etag, size), info


def _landed(path: Path, size: int) -> bool:
    """A file the cache already holds whole (downloads publish only verified files under their name)."""
    return path.is_file() and path.stat().st_size == size


def _lock(version_dir: Path) -> Any:
    return file_lock(version_dir.with_name(version_dir.name + ".lock"))


def _resolve_object(client: Any, ref: S3Ref, root: Path) -> Path:
    version_dir, info = _version_dir(client, ref, root)
    dest = version_dir / PurePosixPath(ref.key).name
    size = int(info["ContentLength"])
    if _landed(dest, size):
        return dest
    with _lock(version_dir):
        # another process may have finished it while this one waited for the lock
        if not _landed(dest, size):
            download_object(client, ref, describe(client, ref, info), dest)
    return dest


def _resolve_archive(client: Any, ref: S3Ref, root: Path) -> ResolvedModel:
    # the version directory (ETag and size in its name) holding `extracted/` is the cache's record that
    # this archive version was fetched, verified and extracted: the archive itself is not kept
    version_dir, info = _version_dir(client, ref, root)
    out = version_dir / EXTRACTED
    if not out.is_dir():
        with _lock(version_dir):
            if not out.is_dir():
                archive = version_dir / PurePosixPath(ref.key).name
                if not _landed(archive, int(info["ContentLength"])):
                    download_object(client, ref, describe(client, ref, info), archive)
                _extract(archive, out, ref)
                archive.unlink()  # half the disk: the extracted model is all that is served
    try:
        return in_directory(out)
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
    rel = key[len(ref.key) :]
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or ".." in parts:
        raise S3ModelError(f"s3://{ref.bucket}/{key}: key would land outside the model directory")
    return rel


def _resolve_prefix(client: Any, ref: S3Ref, root: Path) -> ResolvedModel:
    objects = list_prefix(client, ref)
    entries = [(_relative(ref, o["Key"]), clean_etag(str(o["ETag"])), int(o["Size"])) for o in objects]
    if not any(rel.endswith(".gguf") for rel, _, _ in entries):
        raise S3ModelError(f"{ref.uri}: no *.gguf object under prefix {ref.key!r} in bucket {ref.bucket!r}")
    final = key_dir(root, ref.bucket, ref.key) / listing_version(entries)
    if not final.is_dir():
        with _lock(final):
            if not final.is_dir():
                _download_prefix(client, ref, entries, final)
    return in_directory(final)


def _download_prefix(client: Any, ref: S3Ref, entries: list[tuple[str, str, int]], final: Path) -> None:
    # the staging directory survives an interruption: finished files are kept, partial ones resume
    staging = final.with_name(final.name + ".partial")
    for rel, etag, size in entries:
        dest = staging / rel
        if _landed(dest, size):
            continue
        obj = S3Ref(ref.bucket, ref.key + rel)
        info = describe(client, obj)
        if (info.etag, info.size) != (etag, size):  # replaced since the listing: its digest is stale
            raise S3ModelError(f"{obj.uri}: the object changed while the prefix was downloaded; start again")
        download_object(client, obj, info, dest)
    os.replace(staging, final)
