"""resolve_model on s3:// references against a real S3-compatible server (moto) on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import llmhost.store.download as download
import llmhost.store.s3 as store_s3
from llmhost.store import ModelNotFoundError, resolve_model
from llmhost.store.s3client import S3ModelError
from tests.s3server import S3Server, moto_subprocess, point_env_at

MIB = 1024 * 1024


@pytest.fixture
def s3(server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Server:
    point_env_at(monkeypatch, server)
    monkeypatch.setenv("LLMHOST_CACHE", str(tmp_path / "cache"))
    return server


@pytest.fixture
def bucket(s3: S3Server) -> str:
    name = f"models-{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=name)
    return name


class GetCounter:
    """Counts the GetObject calls llmhost's own S3 clients make; can fail the Nth one."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.gets = 0
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def __call__(self, **_: Any) -> None:
        with self.lock:
            self.gets += 1
            if self.fail_on is not None and self.gets == self.fail_on:
                raise ConnectionResetError("injected: connection lost mid-download")


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> GetCounter:
    c = GetCounter()
    real = store_s3.make_client

    def counted_client(ref: Any) -> Any:
        client = real(ref)
        client.meta.events.register("before-call.s3.GetObject", c)
        return client

    monkeypatch.setattr(store_s3, "make_client", counted_client)
    return c


def test_prefix_keeps_layout_and_second_resolve_downloads_nothing(
    s3: S3Server, bucket: str, counter: GetCounter
) -> None:
    client = s3.client()
    client.put_object(Bucket=bucket, Key="gemma/model.gguf", Body=b"GGUF" + os.urandom(3 * MIB))
    client.put_object(Bucket=bucket, Key="gemma/tokenizer/config.json", Body=b"{}")
    client.put_object(Bucket=bucket, Key="gemma-other/x.gguf", Body=b"not under the prefix")
    path = resolve_model(f"s3://{bucket}/gemma/")
    assert path.name == "model.gguf" and path.stat().st_size == 4 + 3 * MIB
    assert (path.parent / "tokenizer" / "config.json").read_bytes() == b"{}"
    assert not (path.parent / "x.gguf").exists()
    first = counter.gets
    assert first >= 2
    assert resolve_model(f"s3://{bucket}/gemma/") == path
    # a prefix written without its trailing slash names the same model
    assert resolve_model(f"s3://{bucket}/gemma") == path
    assert counter.gets == first
    assert not list(path.parent.parent.glob("*.partial*"))


def _model_tar(*files: tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_tar_gz_is_extracted_once(s3: S3Server, bucket: str, counter: GetCounter) -> None:
    body = _model_tar(("model.gguf", b"GGUF-in-a-tar"), ("code/inference.py", b"print()"))
    s3.client().put_object(Bucket=bucket, Key="job/output/model.tar.gz", Body=body)
    path = resolve_model(f"s3://{bucket}/job/output/model.tar.gz")
    assert path.read_bytes() == b"GGUF-in-a-tar"
    assert (path.parent / "code" / "inference.py").is_file()
    assert counter.gets == 1
    # the archive is deleted once extracted: the version directory (its ETag and size) holding
    # extracted/ tells the next start that nothing needs fetching
    cache = Path(os.environ["LLMHOST_CACHE"])
    assert not [p for p in cache.rglob("model.tar.gz") if p.is_file()]
    assert resolve_model(f"s3://{bucket}/job/output/model.tar.gz") == path
    assert counter.gets == 1


def test_unsafe_tar_is_refused(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    body = _model_tar(("model.gguf", b"x"), ("../../escaped.gguf", b"x"))
    s3.client().put_object(Bucket=bucket, Key="bad/model.tar.gz", Body=body)
    with pytest.raises(S3ModelError, match="refused to extract"):
        resolve_model(f"s3://{bucket}/bad/model.tar.gz")
    assert not list(tmp_path.rglob("escaped.gguf"))


def test_multipart_upload_is_verified(
    s3: S3Server, bucket: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "big.gguf"
    src.write_bytes(os.urandom(17 * MIB))
    s3.client().upload_file(str(src), bucket, "big.gguf")  # boto3 uploads this in 8 MiB parts
    caplog.set_level("INFO", logger="llmhost.store")
    path = resolve_model(f"s3://{bucket}/big.gguf")
    assert path.read_bytes() == src.read_bytes()
    # the part size came from a HEAD of part 1, so the "-3" ETag was recomputed, not skipped
    assert f"verified s3://{bucket}/big.gguf (multipart check)" in caplog.text


def test_concurrent_resolves_share_one_download(s3: S3Server, bucket: str, counter: GetCounter) -> None:
    s3.client().put_object(Bucket=bucket, Key="m/model.gguf", Body=os.urandom(2 * MIB))
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(resolve_model(f"s3://{bucket}/m/"))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 3
    assert counter.gets == 1  # 2 MiB fits one 8 MiB range: one GET in all, not one per caller


def test_interrupted_download_resumes_and_is_never_served(
    s3: S3Server, bucket: str, counter: GetCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download, "DEFAULT_PART_SIZE", MIB)
    monkeypatch.setattr(download, "DEFAULT_WORKERS", 1)  # one worker: ranges finish in order
    monkeypatch.setattr(download, "RANGE_TRIES", 1)  # this run gives up at the first failure
    data = os.urandom(6 * MIB + 123)
    s3.client().put_object(Bucket=bucket, Key="r/model.gguf", Body=data)
    counter.fail_on = 4
    with pytest.raises(S3ModelError, match=f"s3://{bucket}/r/model.gguf"):
        resolve_model(f"s3://{bucket}/r/model.gguf")
    cache = Path(os.environ["LLMHOST_CACHE"])
    assert not [p for p in cache.rglob("model.gguf") if p.is_file()]  # nothing half-written published
    assert len(list(cache.rglob("model.gguf.partial"))) == 1
    (state,) = cache.rglob("model.gguf.partial.json")
    kept = set(json.loads(state.read_text())["done"])
    # ranges 0-2 landed before the 4th GET failed; the worker may have fetched range 4 meanwhile
    assert {0, 1, 2} <= kept and 3 not in kept
    counter.fail_on, counter.gets = None, 0
    path = resolve_model(f"s3://{bucket}/r/model.gguf")
    assert path.read_bytes() == data
    assert counter.gets == 7 - len(kept)  # only the missing ranges are fetched again
    assert not list(cache.rglob("*.partial*"))


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (
            "s3://no-such-bucket-xyz/m.gguf",
            "s3://no-such-bucket-xyz/m.gguf: bucket 'no-such-bucket-xyz' does",
        ),
        ("s3://no-such-bucket-xyz/p/", "bucket 'no-such-bucket-xyz' does not exist"),
        ("s3://{bucket}/missing.gguf", "no object 'missing.gguf' in bucket '{bucket}'"),
        ("s3://{bucket}/missing.tar.gz", "no object 'missing.tar.gz' in bucket '{bucket}'"),
        ("s3://{bucket}/empty/", "no objects under prefix 'empty/' in bucket '{bucket}'"),
        ("s3://{bucket}/nogguf/", "no *.gguf object under prefix 'nogguf/'"),
    ],
)
def test_missing_things_name_bucket_and_key(s3: S3Server, bucket: str, ref: str, expected: str) -> None:
    s3.client().put_object(Bucket=bucket, Key="nogguf/readme.txt", Body=b"hi")
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model(ref.format(bucket=bucket))
    assert expected.format(bucket=bucket) in str(info.value)


def test_wrong_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLMHOST_CACHE", str(tmp_path))
    with moto_subprocess(unauthenticated_actions=3) as server:
        point_env_at(monkeypatch, server)
        client = server.client()
        client.create_bucket(Bucket="private")
        client.put_object(Bucket="private", Key="m/model.gguf", Body=b"GGUF")
        client.put_object(Bucket="private", Key="model.gguf", Body=b"GGUF")
        # from here on moto checks keys, and "testing" is no key it knows
        for ref in ("s3://private/m/", "s3://private/model.gguf"):
            with pytest.raises(S3ModelError, match=f"{ref}: access denied .* bucket 'private'"):
                resolve_model(ref)


def test_full_disk_is_named(s3: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s3.client().put_object(Bucket=bucket, Key="d/model.gguf", Body=b"GGUF" * 100)

    def no_space(fd: int, data: bytes, offset: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(download.os, "pwrite", no_space)
    with pytest.raises(S3ModelError, match=f"s3://{bucket}/d/model.gguf: disk full: no space left"):
        resolve_model(f"s3://{bucket}/d/model.gguf")


def test_endpoint_url_from_llmhost_setting(
    s3: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("LLMHOST_S3_ENDPOINT_URL", s3.url)
    s3.client().put_object(Bucket=bucket, Key="e.gguf", Body=b"GGUF")
    assert resolve_model(f"s3://{bucket}/e.gguf").read_bytes() == b"GGUF"


_SLOW_DOWNLOAD = """
import sys, time
import llmhost.store.download as download
import llmhost.store.s3 as store_s3
from llmhost.store import resolve_model

download.DEFAULT_PART_SIZE, download.DEFAULT_WORKERS = 1024 * 1024, 1
real = store_s3.make_client

def slow_client(ref):
    client = real(ref)
    # slow enough that the test can kill this process between two ranges
    client.meta.events.register("before-call.s3.GetObject", lambda **_: time.sleep(0.3))
    return client

store_s3.make_client = slow_client
resolve_model(sys.argv[1])
"""


def test_killed_download_resumes(s3: S3Server, bucket: str, counter: GetCounter, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    data = os.urandom(8 * MIB)
    s3.client().put_object(Bucket=bucket, Key="k/model.gguf", Body=data)
    ref = f"s3://{bucket}/k/model.gguf"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_DOWNLOAD, ref])
    cache = Path(os.environ["LLMHOST_CACHE"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = list(cache.rglob("model.gguf.partial.json"))
        if states and len(json.loads(states[0].read_text() or "{}").get("done", [])) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert not [p for p in cache.rglob("model.gguf") if p.is_file()]
    kept = set(json.loads(states[0].read_text())["done"])
    assert 2 <= len(kept) < 8
    path = resolve_model(ref)
    assert path.read_bytes() == data
    assert counter.gets == 8 - len(kept)
