"""Where a server keeps its jobs, and how much a batch may take of it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llmhost.settings.serve import SERVE_SPEC
from llmhost.store.s3uri import S3Ref, parse_s3_ref

DEFAULT_MAX_FILE_MB: int = SERVE_SPEC["jobs_max_file_mb"].default


def default_jobs_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's data directory ($XDG_DATA_HOME, else ~/.local/share), as other tools keep state."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "llmhost" / "jobs"


@dataclass(frozen=True, slots=True)
class JobsSettings:
    """`root`: files and the jobs database (locked by the first process that uses it); `concurrency`:
    a batch's lines in flight at once (the engine's sequences, or the copies' together), and async
    invocations' too; `async_output` / `async_failure`: the S3 prefixes async invocations' answers and
    errors are written under ("": none, async invocations refused / errors beside the answers)."""

    root: Path
    max_file_bytes: int = DEFAULT_MAX_FILE_MB * 1024 * 1024
    concurrency: int = 8
    async_output: str = ""
    async_failure: str = ""

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1:
            raise ValueError(f"jobs max file size must be >= 1 byte, got {self.max_file_bytes}")
        if self.concurrency < 1:
            raise ValueError(f"batch concurrency must be >= 1, got {self.concurrency}")
        if self.async_failure and not self.async_output:
            raise ValueError("--async-failure is given without --async-output: give both, or neither")
        _prefix(self.async_output, "--async-output")
        _prefix(self.async_failure, "--async-failure")

    @property
    def output_prefix(self) -> S3Ref | None:
        """Where async invocations' answers go (None: the server takes none)."""
        return _prefix(self.async_output, "--async-output")

    @property
    def failure_prefix(self) -> S3Ref | None:
        """Where their errors go: --async-failure, else beside the answers."""
        return _prefix(self.async_failure, "--async-failure") or self.output_prefix


def _prefix(uri: str, flag: str) -> S3Ref | None:
    """An s3:// prefix, read as a folder (a key that does not end in / gets one)."""
    if not uri:
        return None
    try:
        ref = parse_s3_ref(uri)
    except ValueError as exc:
        raise ValueError(f"{flag} must be an S3 prefix such as s3://bucket/prefix/: {exc}") from None
    return ref if ref.is_prefix else S3Ref(ref.bucket, ref.key + "/")
