"""Reading and writing whole S3 objects for async invocations, off the event loop (boto3 blocks), on the
S3 client s3:// models use (its endpoint URL setting, so a local S3 answers as AWS does)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from llmhost.errors import LlmhostError
from llmhost.store.s3client import S3ModelError, make_client, s3_failures, translate
from llmhost.store.s3uri import S3Ref, parse_s3_ref


class S3ObjectError(LlmhostError):
    """An object could not be read or written: the message names it and the cause."""


class S3Objects:
    """One client, made on first use (a server that never takes an async invocation never imports
    boto3)."""

    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    async def read(self, uri: str) -> bytes:
        return await asyncio.to_thread(self._read, parse_s3_ref(uri))

    async def write(self, uri: str, body: bytes, content_type: str) -> None:
        await asyncio.to_thread(self._write, parse_s3_ref(uri), body, content_type)

    def _read(self, ref: S3Ref) -> bytes:
        try:
            data: bytes = self._client_for(ref).get_object(Bucket=ref.bucket, Key=ref.key)["Body"].read()
        except s3_failures() as exc:
            raise S3ObjectError(str(translate(exc, ref))) from None
        return data

    def _write(self, ref: S3Ref, body: bytes, content_type: str) -> None:
        try:
            self._client_for(ref).put_object(
                Bucket=ref.bucket, Key=ref.key, Body=body, ContentType=content_type
            )
        except s3_failures() as exc:
            raise S3ObjectError(str(translate(exc, ref))) from None

    def _client_for(self, ref: S3Ref) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    self._client = make_client(ref)
                except S3ModelError as exc:
                    raise S3ObjectError(str(exc)) from None
            return self._client
