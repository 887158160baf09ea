"""Where a server keeps its jobs, and how much a batch may take of it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llmhost.settings.serve import SERVE_SPEC

DEFAULT_MAX_FILE_MB: int = SERVE_SPEC["jobs_max_file_mb"].default


def default_jobs_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's data directory ($XDG_DATA_HOME, else ~/.local/share), as other tools keep state."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "llmhost" / "jobs"


@dataclass(frozen=True, slots=True)
class JobsSettings:
    """`root`: files and the jobs database (locked by the first process that uses it); `concurrency`:
    a batch's lines in flight at once (the engine's sequences, or the copies' together)."""

    root: Path
    max_file_bytes: int = DEFAULT_MAX_FILE_MB * 1024 * 1024
    concurrency: int = 8

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1:
            raise ValueError(f"jobs max file size must be >= 1 byte, got {self.max_file_bytes}")
        if self.concurrency < 1:
            raise ValueError(f"batch concurrency must be >= 1, got {self.concurrency}")
