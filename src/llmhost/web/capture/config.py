"""What a server captures, where, and how much of it (checked once, at start)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from llmhost.store.s3uri import S3Ref, is_s3_ref, parse_s3_ref

DEFAULT_VARIANT = "AllTraffic"  # SageMaker's variant name when an endpoint has one
# bytes of captured requests and answers waiting for the writer; beyond it events are dropped
DEFAULT_QUEUE_BYTES = 64 * 1024 * 1024


class Mode(StrEnum):
    """SageMaker's CaptureMode: the request as received, the answer as returned."""

    INPUT = "input"
    OUTPUT = "output"


def parse_modes(text: str) -> frozenset[Mode]:
    """`input`, `output` or `input,output` (any case, either order, as SageMaker's CaptureOptions list)."""
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    known = {m.value for m in Mode}
    wrong = [n for n in names if n not in known]
    if wrong or not names:
        raise ValueError(f"--capture-mode must be input, output or input,output, got {text!r}")
    return frozenset(Mode(n) for n in names)


def _check_name(value: str, flag: str) -> None:
    # a path segment of every file: a slash or a dot-dot would write elsewhere
    if not value or "/" in value or "\\" in value or value in (".", ".."):
        raise ValueError(f"{flag} must be a name without slashes, got {value!r}")


def _s3_prefix(destination: str) -> S3Ref | None:
    """An s3:// destination as a prefix (a key that does not end in / gets one); None: a folder."""
    if not is_s3_ref(destination):
        return None
    try:
        ref = parse_s3_ref(destination)
    except ValueError as exc:
        raise ValueError(f"--capture-dir: {exc}") from None
    return ref if ref.is_prefix else S3Ref(ref.bucket, ref.key + "/")


@dataclass(frozen=True, slots=True)
class CaptureConfig:
    """`destination`: a folder or an s3:// prefix; `percent`: requests sampled; `endpoint` / `variant`:
    the first folders under it; `interval_s`: seconds between S3 uploads; `queue_bytes`: the writer's
    backlog bound."""

    destination: str
    endpoint: str
    percent: int = 100
    modes: frozenset[Mode] = frozenset(Mode)
    variant: str = DEFAULT_VARIANT
    interval_s: float = 30.0
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.destination:
            raise ValueError("--capture-dir is empty")
        if not 0 <= self.percent <= 100:
            raise ValueError(f"--capture-percent must be in 0..100, got {self.percent}")
        if not self.modes:
            raise ValueError("--capture-mode names nothing to capture")
        _check_name(self.endpoint, "--capture-endpoint")
        _check_name(self.variant, "--capture-variant")
        if not self.interval_s > 0:
            raise ValueError(f"--capture-interval-s must be > 0, got {self.interval_s}")
        if self.queue_bytes < 1:
            raise ValueError(f"capture queue must hold >= 1 byte, got {self.queue_bytes}")
        _s3_prefix(self.destination)  # its own check

    @property
    def s3_prefix(self) -> S3Ref | None:
        """The S3 prefix captured files go under; None: a folder."""
        return _s3_prefix(self.destination)

    @property
    def location(self) -> str:
        """Where the files go (as sinks.make_sink writes them): DESTINATION/ENDPOINT/VARIANT/."""
        prefix = self.s3_prefix
        under = f"{self.endpoint}/{self.variant}/"
        return prefix.uri + under if prefix is not None else f"{Path(self.destination).expanduser()}/{under}"

    @property
    def captures_input(self) -> bool:
        return Mode.INPUT in self.modes

    @property
    def captures_output(self) -> bool:
        return Mode.OUTPUT in self.modes

    def sampled(self) -> bool:
        """Whether this request is captured: `percent` of them, each drawn independently."""
        if self.percent >= 100:
            return True
        return self.percent > 0 and self.rng.random() * 100 < self.percent
