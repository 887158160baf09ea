"""The boto3 client and the translation of S3 failures into errors that name the bucket and key.

boto3 is imported inside functions only: serving a local file must not pay for (or need) it.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from llmhost.store.resolve import ModelNotFoundError
from llmhost.store.s3uri import S3Ref

ENDPOINT_ENV = "AWS_ENDPOINT_URL"
# boto3 reads AWS_ENDPOINT_URL itself; this one lets an llmhost setting not affect other AWS tools
LLMHOST_ENDPOINT_ENV = "LLMHOST_S3_ENDPOINT_URL"

_ACCESS = {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
           "InvalidToken", "AllAccessDisabled"}


class S3ModelError(ModelNotFoundError):
    """An s3:// model could not be fetched; the message names the bucket and key and the cause."""


def endpoint_url() -> str | None:
    return os.environ.get(LLMHOST_ENDPOINT_ENV) or os.environ.get(ENDPOINT_ENV) or None


def make_client(max_pool: int = 16) -> Any:
    """An S3 client on the standard credential chain (env, profile, SSO, instance role...)."""
    import boto3
    from botocore.config import Config

    config = Config(max_pool_connections=max_pool, retries={"max_attempts": 5, "mode": "standard"})
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url(), config=config)


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
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code == "NoSuchBucket":
            return S3ModelError(f"{where}: bucket {ref.bucket!r} does not exist")
        if code in ("NoSuchKey", "404", "NotFound"):
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
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return S3ModelError(f"{where}: no space left on the cache disk while downloading ({exc})")
    return S3ModelError(f"{where}: {type(exc).__name__}: {exc}")


def s3_failures() -> tuple[type[BaseException], ...]:
    """The exceptions `translate` understands (botocore's, and a full disk)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError, OSError)


def head(client: Any, ref: S3Ref) -> dict[str, Any]:
    try:
        return dict(client.head_object(Bucket=ref.bucket, Key=ref.key))
    except s3_failures() as exc:
        raise _head_error(client, ref, exc) from None


def _head_error(client: Any, ref: S3Ref, exc: BaseException) -> S3ModelError:
    # HEAD answers a bare 404 for both a missing bucket and a missing key: ask the bucket to tell apart
    err = translate(exc, ref)
    if "no object" in str(err):
        try:
            client.head_bucket(Bucket=ref.bucket)
        except s3_failures() as bucket_exc:
            code = getattr(bucket_exc, "response", {}).get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchBucket", "NotFound"):
                return S3ModelError(f"s3://{ref.bucket}/{ref.key}: bucket {ref.bucket!r} does not exist")
    return err


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
