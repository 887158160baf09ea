"""Integrity, retries and local failures of s3:// downloads, against moto on 127.0.0.1 reached through a
real HTTP proxy that can cut connections and corrupt bytes (tests/s3proxy.py)."""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

import llmhost.store.download as download
from llmhost.store import resolve_model
from llmhost.store.s3client import S3ModelError
from tests.s3proxy import Proxy, s3_proxy
from tests.s3server import S3Server, point_env_at

MIB = 1024 * 1024


@pytest.fixture
def proxy(server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Proxy]:
    """llmhost talks to moto through the proxy; the test uploads to moto directly."""
    with s3_proxy(server.url) as p:
        point_env_at(monkeypatch, server)
        monkeypatch.setenv("AWS_ENDPOINT_URL", p.url)
        monkeypatch.setenv("LLMHOST_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(download, "DEFAULT_PART_SIZE", MIB)
        monkeypatch.setattr(download, "RETRY_BASE_S", 0.01)
        yield p


@pytest.fixture
def bucket(server: S3Server, proxy: Proxy) -> str:
    name = f"models-{uuid.uuid4().hex[:12]}"
    server.client().create_bucket(Bucket=name)
    return name


def plain_client(server: S3Server) -> Any:
    """A client that adds no additional checksum to what it uploads (boto3 adds CRC32 by default)."""
    return boto3.client(
        "s3",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(request_checksum_calculation="when_required"),
    )


def test_a_cut_range_is_fetched_again_within_the_run(
    server: S3Server, bucket: str, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    data = os.urandom(3 * MIB + 5)
    server.client().put_object(Bucket=bucket, Key="r/model.gguf", Body=data)
    proxy.faults.cut_first_range_get = True
    caplog.set_level("INFO", logger="llmhost.store")
    path = resolve_model(f"s3://{bucket}/r/model.gguf")
    assert path.read_bytes() == data
    gets = proxy.recorder.object_gets("r/model.gguf")
    assert len(gets) == 8  # 4 ranges, each cut once and fetched again
    ends = [min((i + 1) * MIB, len(data)) - 1 for i in range(4)]
    assert {g.range for g in gets} == {f"bytes={i * MIB}-{end}" for i, end in enumerate(ends)}
    assert "try 2 of 4" in caplog.text and f"verified s3://{bucket}/r/model.gguf (md5 check)" in caplog.text


def test_a_range_cut_every_time_gives_up_naming_the_object(
    server: S3Server, bucket: str, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download, "RANGE_TRIES", 2)
    server.client().put_object(Bucket=bucket, Key="cut/model.gguf", Body=os.urandom(MIB // 2))
    proxy.faults.cut_every_range_get = True
    with pytest.raises(
        S3ModelError, match=f"s3://{bucket}/cut/model.gguf: range bytes=0-524287 failed 2 time"
    ):
        resolve_model(f"s3://{bucket}/cut/model.gguf")
    assert len(proxy.recorder.object_gets("cut/model.gguf")) == 2
    partial = next(Path(os.environ["LLMHOST_CACHE"]).rglob("model.gguf.partial"))
    # the space was reserved before the first byte: fallocate, not a sparse truncate
    assert partial.stat().st_size == MIB // 2 and partial.stat().st_blocks * 512 >= MIB // 2


@pytest.mark.parametrize("kms", [False, True])
def test_corrupted_bytes_fail_the_check_and_are_deleted(
    server: S3Server, bucket: str, proxy: Proxy, kms: bool
) -> None:
    extra = {"ServerSideEncryption": "aws:kms"} if kms else {}
    server.client().put_object(Bucket=bucket, Key="bad/model.gguf", Body=os.urandom(2 * MIB), **extra)
    proxy.faults.flip_get_byte = True
    # an SSE-KMS object's ETag is no MD5: its CRC32 (boto3 adds one to every upload) is checked instead
    kind = "crc32" if kms else "md5"
    with pytest.raises(S3ModelError, match=f"bad/model.gguf: downloaded file failed its {kind} check"):
        resolve_model(f"s3://{bucket}/bad/model.gguf")
    assert not [p for p in Path(os.environ["LLMHOST_CACHE"]).rglob("model.gguf*") if p.is_file()]


def test_bytes_altered_once_are_fetched_again(
    server: S3Server, bucket: str, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    body = os.urandom(2 * MIB)
    server.client().put_object(Bucket=bucket, Key="once/model.gguf", Body=body)
    proxy.faults.flip_gets = 1  # the first range of the first download
    path = resolve_model(f"s3://{bucket}/once/model.gguf")
    assert path.read_bytes() == body
    assert "failed its md5 check" in caplog.text and "fetching it again (attempt 2 of 2)" in caplog.text
    assert len(proxy.recorder.object_gets("once/model.gguf")) == 4  # two ranges, twice


@pytest.mark.parametrize(
    ("algorithm", "multipart", "kind"),
    [
        ("SHA256", False, "sha256"),
        ("SHA1", False, "sha1"),
        ("CRC32", False, "crc32"),
        ("CRC32", True, "crc32"),
        ("SHA256", True, "sha256"),
    ],
)
def test_encrypted_objects_are_verified_by_their_checksum(
    server: S3Server,
    bucket: str,
    proxy: Proxy,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    algorithm: str,
    multipart: bool,
    kind: str,
) -> None:
    src = tmp_path / "src.gguf"
    src.write_bytes(os.urandom(11 * MIB if multipart else MIB + 7))
    extra = {"ServerSideEncryption": "aws:kms", "ChecksumAlgorithm": algorithm}
    # 5 MiB parts: a multipart checksum is the checksum of the parts' checksums
    config = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    server.client().upload_file(str(src), bucket, "enc/model.gguf", ExtraArgs=extra, Config=config)
    caplog.set_level("INFO", logger="llmhost.store")
    path = resolve_model(f"s3://{bucket}/enc/model.gguf")
    assert path.read_bytes() == src.read_bytes()
    assert f"verified s3://{bucket}/enc/model.gguf ({kind} check)" in caplog.text


def test_without_etag_or_checksum_the_log_says_size_only(
    server: S3Server, bucket: str, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    plain_client(server).put_object(
        Bucket=bucket, Key="s/model.gguf", Body=b"GGUF" * 10, ServerSideEncryption="aws:kms"
    )
    caplog.set_level("INFO", logger="llmhost.store")
    assert resolve_model(f"s3://{bucket}/s/model.gguf").read_bytes() == b"GGUF" * 10
    assert (
        f"verified s3://{bucket}/s/model.gguf (size-only check: encrypted (SSE-KMS/SSE-C) object and "
        "no S3 additional checksum)"
    ) in caplog.text


def test_a_full_disk_fails_before_any_get(
    server: S3Server, bucket: str, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.client().put_object(Bucket=bucket, Key="full/model.gguf", Body=os.urandom(MIB))

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(download.os, "posix_fallocate", no_space)
    with pytest.raises(
        S3ModelError, match=f"s3://{bucket}/full/model.gguf: disk full: no space left in the model cache"
    ):
        resolve_model(f"s3://{bucket}/full/model.gguf")
    assert proxy.recorder.object_gets() == []


def test_each_range_is_on_disk_before_it_is_recorded(
    server: S3Server, bucket: str, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download, "DEFAULT_WORKERS", 1)
    server.client().put_object(Bucket=bucket, Key="sync/model.gguf", Body=os.urandom(3 * MIB))
    events: list[str] = []
    real_sync, real_save = download.os.fdatasync, download.save_done

    def sync(fd: int) -> None:
        real_sync(fd)
        events.append("synced")

    def save(state: Path, etag: str, size: int, part_size: int, done: set[int]) -> None:
        events.append(f"recorded {sorted(done)}")
        real_save(state, etag, size, part_size, done)

    monkeypatch.setattr(download.os, "fdatasync", sync)
    monkeypatch.setattr(download, "save_done", save)
    resolve_model(f"s3://{bucket}/sync/model.gguf")
    assert events == [
        "recorded []",
        "synced",
        "recorded [0]",
        "synced",
        "recorded [0, 1]",
        "synced",
        "recorded [0, 1, 2]",
    ]


def test_bad_endpoint_url_is_named(bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMHOST_S3_ENDPOINT_URL", "localhost:9000")  # no scheme: botocore's ValueError
    with pytest.raises(
        S3ModelError, match=f"s3://{bucket}/m.gguf: S3 endpoint URL 'localhost:9000' is not usable"
    ):
        resolve_model(f"s3://{bucket}/m.gguf")


def test_unusable_cache_is_named(
    server: S3Server, bucket: str, proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.client().put_object(Bucket=bucket, Key="c/model.gguf", Body=b"GGUF")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("LLMHOST_CACHE", str(blocker / "cache"))  # the lock's directory cannot be made
    with pytest.raises(S3ModelError, match=f"s3://{bucket}/c/model.gguf: model cache .*a-file.*: Not a dir"):
        resolve_model(f"s3://{bucket}/c/model.gguf")
    monkeypatch.setenv("LLMHOST_CACHE", str(tmp_path / "cache2"))

    real_replace = download.os.replace

    def refused(src: Any, dst: Any) -> None:
        if Path(dst).name != "model.gguf":
            return real_replace(src, dst)
        raise PermissionError(errno.EACCES, "Permission denied", str(dst))

    monkeypatch.setattr(download.os, "replace", refused)  # publishing the verified file
    with pytest.raises(
        S3ModelError,
        match=(
            f"s3://{bucket}/c/model.gguf: cannot write the model cache "
            r"\(.*/model.gguf\): Permission denied"
        ),
    ):
        resolve_model(f"s3://{bucket}/c/model.gguf")
