"""`s3://bucket/key` references: parsing and the kind of artifact they name."""

from __future__ import annotations

from dataclasses import dataclass

SCHEME = "s3://"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


@dataclass(frozen=True)
class S3Ref:
    bucket: str
    key: str  # "" for a whole bucket; a prefix ends with "/"

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}"

    @property
    def is_prefix(self) -> bool:
        return self.key == "" or self.key.endswith("/")

    @property
    def is_archive(self) -> bool:
        return self.key.endswith(ARCHIVE_SUFFIXES)


def is_s3_ref(ref: str | None) -> bool:
    return ref is not None and ref.startswith(SCHEME)


def parse_s3_ref(ref: str) -> S3Ref:
    if not is_s3_ref(ref):
        raise ValueError(f"not an s3:// reference: {ref!r}")
    bucket, _, key = ref[len(SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"s3 reference {ref!r} names no bucket")
    return S3Ref(bucket, key)
