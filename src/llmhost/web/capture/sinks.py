"""Where captured lines go: files in a folder (one a process and an hour, appended and flushed a batch at
a time) or objects under an S3 prefix (one an upload and an hour, uploaded every interval). A sink runs
on the writer's thread only."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from llmhost.errors import UnavailableError
from llmhost.store.s3client import S3ModelError, make_client, s3_failures, translate
from llmhost.store.s3uri import S3Ref
from llmhost.web.capture.record import file_name, hour_folder

# an upload is begun early once this many bytes wait (the interval bounds it otherwise)
MAX_OBJECT_BYTES = 16 * 1024 * 1024
CONTENT_TYPE = "application/jsonlines"
# a sink that is down must not hold the writer for long: its backlog drops what does not fit meanwhile
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
ATTEMPTS = 2


@dataclass(frozen=True, slots=True)
class Line:
    time: float  # the event's, whose hour decides the folder
    data: bytes  # the JSON line, newline included


class SinkError(UnavailableError):
    """Some lines could not be stored: `lost` of them (and `stored` were), and why."""

    def __init__(self, lost: int, stored: int, reason: str) -> None:
        super().__init__(reason)
        self.lost = lost
        self.stored = stored


class Sink(Protocol):
    where: str  # the destination, for logs

    def write(self, lines: Sequence[Line], force: bool = False) -> int:
        """Take `lines`; return how many lines are now stored (SinkError when some were lost). `force`:
        store whatever waits now (at shutdown)."""
        ...

    def close(self) -> None: ...


def by_hour(lines: Sequence[Line], endpoint: str, variant: str) -> Iterator[tuple[str, list[Line]]]:
    """Consecutive lines of the same hour, with their folder."""
    for folder, group in itertools.groupby(lines, key=lambda ln: hour_folder(endpoint, variant, ln.time)):
        yield folder, list(group)


class FileSink:
    """ROOT/ENDPOINT/VARIANT/yyyy/mm/dd/hh/MM-SS-mmm-UUID.jsonl: this process's file of the hour, kept
    open, appended a batch at a time and flushed after each; a new hour begins a new file, which appears
    under its name with its first batch in it (written as `.NAME.part`, then renamed): a reader that
    polls the folder, as S3 readers see whole objects, never finds it empty or its first line cut."""

    def __init__(self, root: Path, endpoint: str, variant: str) -> None:
        self.root = root
        self.where = str(root)
        self.endpoint = endpoint
        self.variant = variant
        self._folder = ""
        self._file: IO[bytes] | None = None

    def write(self, lines: Sequence[Line], force: bool = False) -> int:
        stored = 0
        for folder, group in by_hour(lines, self.endpoint, self.variant):
            data = b"".join(ln.data for ln in group)
            try:
                if self._file is not None and folder == self._folder:
                    self._file.write(data)
                    self._file.flush()
                else:
                    self._begin(folder, group[0].time, data)
            except OSError as exc:
                self.close()  # the next batch opens a new file
                reason = f"{exc.filename or self.root}: {exc.strerror or exc}"
                raise SinkError(len(lines) - stored, stored, reason) from None
            stored += len(group)
        return stored

    def _begin(self, folder: str, epoch: float, data: bytes) -> None:
        """A new file in `folder`, named after `epoch`, holding `data` when it appears."""
        self.close()
        path = self.root / folder
        path.mkdir(parents=True, exist_ok=True)
        name = file_name(epoch)
        staged = path / f".{name}.part"
        out = staged.open("ab")
        try:
            out.write(data)
            out.flush()
            staged.rename(path / name)  # the open file follows its new name
        except OSError:
            out.close()
            staged.unlink(missing_ok=True)
            raise
        self._file, self._folder = out, folder

    def close(self) -> None:
        if self._file is not None:
            # its lines were counted when they were flushed (or lost then)
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
            self._folder = ""


class S3Sink:
    """PREFIX/ENDPOINT/VARIANT/yyyy/mm/dd/hh/MM-SS-mmm-UUID.jsonl: the lines that waited an interval (or
    MAX_OBJECT_BYTES), an object for each hour among them; a failed upload's lines are lost."""

    def __init__(
        self,
        prefix: S3Ref,
        endpoint: str,
        variant: str,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefix = prefix
        self.where = prefix.uri
        self.endpoint = endpoint
        self.variant = variant
        self.interval_s = interval_s
        self._clock = clock
        self._pending: list[Line] = []
        self._bytes = 0
        self._since = clock()
        self._client: Any = None

    def write(self, lines: Sequence[Line], force: bool = False) -> int:
        self._pending.extend(lines)
        self._bytes += sum(len(ln.data) for ln in lines)
        due = force or self._bytes >= MAX_OBJECT_BYTES or self._clock() - self._since >= self.interval_s
        if not due:
            return 0
        pending, self._pending, self._bytes, self._since = self._pending, [], 0, self._clock()
        stored, lost, reason = 0, 0, ""
        for folder, group in by_hour(pending, self.endpoint, self.variant):
            ref = S3Ref(self.prefix.bucket, f"{self.prefix.key}{folder}/{file_name(group[0].time)}")
            try:
                self._put(ref, b"".join(ln.data for ln in group))
            except SinkError as exc:
                lost, reason = lost + len(group), str(exc)
                continue
            stored += len(group)
        if lost:
            raise SinkError(lost, stored, reason)
        return stored

    def _put(self, ref: S3Ref, body: bytes) -> None:
        try:
            if self._client is None:
                self._client = make_client(
                    ref, attempts=ATTEMPTS, connect_timeout_s=CONNECT_TIMEOUT_S, read_timeout_s=READ_TIMEOUT_S
                )
            self._client.put_object(Bucket=ref.bucket, Key=ref.key, Body=body, ContentType=CONTENT_TYPE)
        except S3ModelError as exc:
            raise SinkError(0, 0, str(exc)) from None
        except s3_failures() as exc:
            raise SinkError(0, 0, str(translate(exc, ref))) from None

    def close(self) -> None:
        self._client = None


def make_sink(destination: str, prefix: S3Ref | None, endpoint: str, variant: str, interval_s: float) -> Sink:
    """An S3 sink for an s3:// `prefix`, else a folder's."""
    if prefix is not None:
        return S3Sink(prefix, endpoint, variant, interval_s)
    return FileSink(Path(destination).expanduser(), endpoint, variant)
