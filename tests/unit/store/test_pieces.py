"""The pure pieces of s3:// model references: URIs, range planning, ETags, cache keys, tar safety."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from llmhost.store.cache import key_dir, listing_version, object_version
from llmhost.store.download import load_done, recorded_part_size, save_done
from llmhost.store.integrity import Checksum, file_checksum, info_from_head, planned_check
from llmhost.store.ranges import (
    ByteRange,
    coverage_problem,
    etag_check,
    multipart_etag,
    pending_ranges,
    plan_ranges,
    verify_etag,
)
from llmhost.store.s3uri import parse_s3_ref
from llmhost.store.tarsafe import UnsafeArchiveError, safe_extract


def test_parse_s3_ref() -> None:
    ref = parse_s3_ref("s3://bucket/models/gemma/")
    assert (ref.bucket, ref.key, ref.is_prefix, ref.is_archive) == ("bucket", "models/gemma/", True, False)
    archive = parse_s3_ref("s3://bucket/a/model.tar.gz")
    assert archive.is_archive and not archive.is_prefix
    assert parse_s3_ref("s3://bucket").is_prefix
    with pytest.raises(ValueError, match="no bucket"):
        parse_s3_ref("s3:///key")


@pytest.mark.parametrize(
    ("size", "part", "expected"),
    [
        (0, 8, []),
        (8, 8, [(0, 7)]),
        (9, 8, [(0, 7), (8, 8)]),
        (20, 8, [(0, 7), (8, 15), (16, 19)]),
    ],
)
def test_plan_ranges_cover_the_object_exactly(size: int, part: int, expected: list[tuple[int, int]]) -> None:
    ranges = plan_ranges(size, part)
    assert [(r.start, r.end) for r in ranges] == expected
    assert sum(r.length for r in ranges) == size
    assert [r.index for r in ranges] == list(range(len(expected)))
    if ranges:
        assert ranges[0].header == f"bytes=0-{expected[0][1]}"


def test_pending_ranges_skip_finished_ones() -> None:
    ranges = plan_ranges(40, 8)
    assert [r.index for r in pending_ranges(ranges, {0, 2, 4})] == [1, 3]
    with pytest.raises(ValueError):
        plan_ranges(10, 0)


def test_etag_rules(tmp_path: Path) -> None:
    data = os.urandom(25)
    f = tmp_path / "blob"
    f.write_bytes(data)
    md5 = hashlib.md5(data).hexdigest()
    assert verify_etag(f, f'"{md5}"', None) == (True, "md5")
    assert verify_etag(f, md5.upper(), None) == (True, "md5")
    assert verify_etag(f, "0" * 32, None) == (False, "md5")
    parts = [hashlib.md5(data[i : i + 10]).digest() for i in range(0, 25, 10)]
    multipart = f"{hashlib.md5(b''.join(parts)).hexdigest()}-3"
    assert multipart_etag(f, 10) == multipart
    assert verify_etag(f, multipart, 10) == (True, "multipart")
    assert verify_etag(f, multipart, 8) == (False, "multipart")
    # part size unknown, or an ETag that is no digest (SSE-KMS, other stores): only the size is checked
    assert etag_check(multipart, None) == "size-only"
    assert etag_check("opaque-etag", None) == "size-only"


def test_cache_keys(tmp_path: Path) -> None:
    assert key_dir(tmp_path, "b", "models/g/") == tmp_path / "s3" / "b" / "models" / "g"
    # a key cannot climb out of the cache
    assert key_dir(tmp_path, "b", "../../etc/x").is_relative_to(tmp_path / "s3" / "b")
    assert object_version('"abc"', 5) == "abc-5"
    a = listing_version([("x.gguf", "e1", 1), ("y", "e2", 2)])
    assert a == listing_version([("y", "e2", 2), ("x.gguf", "e1", 1)])
    assert a != listing_version([("x.gguf", "e1-changed", 1), ("y", "e2", 2)])


def test_resume_state_only_for_the_same_object(tmp_path: Path) -> None:
    state = tmp_path / "m.gguf.partial.json"
    save_done(state, "etag", 100, 10, {0, 3})
    assert load_done(state, "etag", 100, 10) == {0, 3}
    assert load_done(state, "other", 100, 10) == set()
    assert load_done(state, "etag", 100, 20) == set()
    assert recorded_part_size(state) == 10
    state.write_text("{not json")
    assert load_done(state, "etag", 100, 10) == set()
    assert recorded_part_size(state) is None


def _tar(path: Path, *members: tarfile.TarInfo, data: bytes = b"gguf") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for m in members:
            if m.isfile():
                m.size = len(data)
                tar.addfile(m, io.BytesIO(data))
            else:
                tar.addfile(m)
    return path


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_safe_extract_keeps_layout(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "ok.tar.gz",
        tarfile.TarInfo("model.gguf"),
        tarfile.TarInfo("sub/t.json"),
        _link("sub/alias.gguf", "../model.gguf"),
    )
    safe_extract(archive, tmp_path / "out")
    assert (tmp_path / "out" / "model.gguf").read_bytes() == b"gguf"
    assert (tmp_path / "out" / "sub" / "alias.gguf").read_bytes() == b"gguf"


@pytest.mark.parametrize(
    "member",
    [
        tarfile.TarInfo("../evil.gguf"),
        tarfile.TarInfo("/abs/evil.gguf"),
        tarfile.TarInfo("a/../../evil.gguf"),
        _link("model.gguf", "/etc/passwd"),
        _link("model.gguf", "../../outside"),
        _link("model.gguf", "../outside", tarfile.LNKTYPE),
        _link("dev", "", tarfile.CHRTYPE),
    ],
)
def test_safe_extract_refuses_escapes(tmp_path: Path, member: tarfile.TarInfo) -> None:
    archive = _tar(tmp_path / "bad.tar.gz", tarfile.TarInfo("fine.gguf"), member)
    with pytest.raises(UnsafeArchiveError):
        safe_extract(archive, tmp_path / "out" / "x")
    # checked before anything is written
    assert not (tmp_path / "out" / "x" / "fine.gguf").exists()
    assert not (tmp_path / "evil.gguf").exists()


def test_local_models_do_not_import_boto3(tmp_path: Path) -> None:
    import subprocess
    import sys

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    code = (
        "import sys, llmhost.cli, llmhost.store as s; "
        f"s.resolve_model({str(model)!r}); s.resolve_model({str(tmp_path)!r}); "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')], 'boto3 imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_coverage_of_recorded_ranges() -> None:
    ranges = plan_ranges(20, 8)
    assert coverage_problem(ranges, {0, 1, 2}, 20) is None
    assert coverage_problem(ranges, {0, 2}, 20) == "range(s) [1] of 3 never recorded as finished"
    assert coverage_problem(ranges, {0, 1, 2, 7}, 20) == "unknown range(s) [7] recorded"
    assert coverage_problem(ranges, {0, 1, 2}, 21) == "ranges cover 20 bytes of 21"
    gap = [ByteRange(0, 0, 7), ByteRange(1, 9, 19)]
    assert coverage_problem(gap, {0, 1}, 20) == "range 1 starts at byte 9, expected 8"
    assert coverage_problem([], set(), 0) is None


def test_checksums_as_s3_computes_them(tmp_path: Path) -> None:
    import base64
    import zlib

    data = os.urandom(25)
    f = tmp_path / "blob"
    f.write_bytes(data)
    assert file_checksum(f, "SHA256", None) == base64.b64encode(hashlib.sha256(data).digest()).decode()
    parts = [data[i : i + 10] for i in range(0, 25, 10)]
    crcs = b"".join(zlib.crc32(p).to_bytes(4, "big") for p in parts)
    assert file_checksum(f, "CRC32", 10) == base64.b64encode(zlib.crc32(crcs).to_bytes(4, "big")).decode()
    head = {"ContentLength": 25, "ETag": '"' + "a" * 32 + '-3"', "ChecksumCRC32": "AAAA-3"}
    info = info_from_head(head, upload_part_size=10)
    assert info.checksum == Checksum("CRC32", "AAAA", composite=True)
    assert planned_check(info) == ("multipart", "")  # the ETag first, when it can be recomputed
    kms = info_from_head({**head, "ServerSideEncryption": "aws:kms", "ChecksumType": "COMPOSITE"}, 10)
    assert planned_check(kms) == ("crc32", "")
    assert planned_check(info_from_head({**head, "ServerSideEncryption": "aws:kms"})) == (
        "size-only",
        "its composite CRC32 checksum needs the upload's part size, unknown",
    )
    full = info_from_head(
        {"ContentLength": 25, "ETag": "opaque", "ChecksumCRC32C": "x", "ChecksumType": "FULL_OBJECT"}
    )
    assert full.checksum is not None and not full.checksum.composite
    assert planned_check(full) == ("size-only", "its CRC32C checksum cannot be computed here")
