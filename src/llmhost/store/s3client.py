"""The boto3 client and the translation of S3 failures into errors that name the bucket and key.

boto3 is imported inside functions only: serving a local file must not pay for (or need) it.
"""

from __future__ import annotations

import errno
import os
from dataclasses import replace
from typing import Any

from llmhost.store.integrity import ObjectInfo, info_from_head
from llmhost.store.model import ModelNotFoundError
from llmhost.store.s3uri import S3Ref

ENDPOINT_ENV = "AWS_ENDPOINT_URL"
# boto3 reads AWS_ENDPOINT_URL itself; this one lets an llmhost setting not affect other AWS tools
LLMHOST_ENDPOINT_ENV = "LLMHOST_S3_ENDPOINT_URL"

_NO_BUCKET = ("NoSuchBucket",)
_NO_KEY = ("NoSuchKey", "404", "NotFound")
_ACCESS = {
    "AccessDenied",
    "403",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "AllAccessDisabled",
}


class S3ModelError(ModelNotFoundError):
    """An s3:// model could not be fetched; the message names the bucket and key and the cause."""


def endpoint_url() -> str | None:
    return os.environ.get(LLMHOST_ENDPOINT_ENV) or os.environ.get(ENDPOINT_ENV) or None


def make_client(
    ref: S3Ref,
    max_pool: int = 16,
    attempts: int = 5,
    connect_timeout_s: float = 60.0,
    read_timeout_s: float = 60.0,
) -> Any:
    """An S3 client on the standard credential chain (env, profile, SSO, instance role...); `attempts`
    and the timeouts: botocore's defaults unless a caller must not wait that long on a dead endpoint."""
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=max_pool,
        retries={"max_attempts": attempts, "mode": "standard"},
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
    )
    url = endpoint_url()
    try:
        return boto3.session.Session().client("s3", endpoint_url=url, config=config)
    except ValueError as exc:  # botocore: "Invalid endpoint: ..."
        raise S3ModelError(
            f"{ref.uri}: S3 endpoint URL {url!r} is not usable ({exc}); give a URL such as "
            "http://127.0.0.1:9000 (--s3-endpoint-url, $LLMHOST_S3_ENDPOINT_URL or "
            "$AWS_ENDPOINT_URL)"
        ) from None


def error_code(exc: BaseException) -> str:
    """The S3 error code of a ClientError ("NoSuchKey", "404", ...), "" for any other failure."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def translate(exc: BaseException, ref: S3Ref) -> S3ModelError:
    """A clean, actionable error for one failed S3 call on `ref`."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    where = f"s3://{ref.bucket}/{ref.key}"
    if isinstance(exc, ClientError):
        code = error_code(exc)
        if code in _NO_BUCKET:
            return S3ModelError(f"{where}: bucket {ref.bucket!r} does not exist")
        if code in _NO_KEY:
            return S3ModelError(f"{where}: no object {ref.key!r} in bucket {ref.bucket!r}")
        if code in _ACCESS:
            return S3ModelError(
                f"{where}: access denied ({code}) on bucket {ref.bucket!r}, key {ref.key!r}; "
                "check the AWS credentials (env, profile, role) and the bucket policy"
            )
        if code in ("PreconditionFailed", "412"):
            return S3ModelError(f"{where}: the object was replaced during the download; start again")
        return S3ModelError(f"{where}: S3 error {code}: {exc}")
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return S3ModelError(f"{where}: no usable AWS credentials found ({exc})")
    if isinstance(exc, EndpointConnectionError):
        return S3ModelError(f"{where}: cannot reach the S3 endpoint ({exc})")
    if isinstance(exc, OSError):
        return _os_error(where, exc)
    return S3ModelError(f"{where}: {type(exc).__name__}: {exc}")


def _os_error(where: str, exc: OSError) -> S3ModelError:
    """A local failure (cache directory, lock, rename, full disk), naming the path."""
    path = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return S3ModelError(f"{where}: disk full: no space left in the model cache{path} ({exc.strerror})")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return S3ModelError(
            f"{where}: cannot write the model cache{path}: {exc.strerror}; set "
            "$LLMHOST_CACHE to a writable directory"
        )
    if exc.errno is not None and exc.strerror:
        return S3ModelError(f"{where}: model cache{path}: {exc.strerror}")
    return S3ModelError(f"{where}: {type(exc).__name__}: {exc}")


def s3_failures() -> tuple[type[BaseException], ...]:
    """The exceptions `translate` understands (botocore's, and a full disk)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError, OSError)


def head(client: Any, ref: S3Ref) -> dict[str, Any]:
    """The object's HEAD, with its additional checksum if it has one (ChecksumMode=ENABLED)."""
    try:
        return dict(client.head_object(Bucket=ref.bucket, Key=ref.key, ChecksumMode="ENABLED"))
    except s3_failures() as exc:
        raise _head_error(client, ref, exc) from None


def _head_error(client: Any, ref: S3Ref, exc: BaseException) -> S3ModelError:
    # HEAD answers a bare 404 for both a missing bucket and a missing key: ask the bucket to tell apart
    if error_code(exc) in _NO_KEY:
        try:
            client.head_bucket(Bucket=ref.bucket)
        except s3_failures() as bucket_exc:
            if error_code(bucket_exc) in (*_NO_BUCKET, *_NO_KEY):
                return S3ModelError(f"s3://{ref.bucket}/{ref.key}: bucket {ref.bucket!r} does not exist")
    return translate(exc, ref)


def describe(client: Any, ref: S3Ref, head_response: dict[str, Any] | None = None) -> ObjectInfo:
    """What the download and its verification need to know of one object (a HEAD, and a HEAD of part 1
    for a multipart upload: its part size)."""
    info = info_from_head(head_response if head_response is not None else head(client, ref))
    if info.parts or (info.checksum is not None and info.checksum.composite):
        return replace(info, upload_part_size=part_size_of(client, ref, info.parts or 1))
    return info


def part_size_of(client: Any, ref: S3Ref, etag_parts: int | None) -> int | None:
    """The upload's part size (HEAD of part 1), so a multipart ETag can be recomputed; None if unknown."""
    if not etag_parts:
        return None
    try:
        resp = client.head_object(Bucket=ref.bucket, Key=ref.key, PartNumber=1)
    except s3_failures():
        return None
    size = int(resp.get("ContentLength", 0))
    return size or None


def list_prefix(client: Any, ref: S3Ref) -> list[dict[str, Any]]:
    """Every object under the prefix (ListObjectsV2, paginated), "directory marker" keys left out."""
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=ref.bucket, Prefix=ref.key)
        objects = [o for page in pages for o in page.get("Contents", []) if not o["Key"].endswith("/")]
    except s3_failures() as exc:
        raise translate(exc, ref) from None
    if not objects:
        raise S3ModelError(f"{ref.uri}: no objects under prefix {ref.key!r} in bucket {ref.bucket!r}")
    return objects
