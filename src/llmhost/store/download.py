"""Parallel ranged download of one S3 object, resumable, verified, then published atomically.

While it runs the bytes live in `<name>.partial` and the finished ranges in `<name>.partial.json`;
only a verified file is renamed to `<name>`, so a reader never sees a half-written model; one that fails
its check is deleted and fetched once more. The space is reserved up front, and a range is recorded as
finished only once its bytes are on disk (fdatasync): after a crash or power loss, a range the state
calls finished holds the object's bytes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from llmhost.store.integrity import SIZE_ONLY, ObjectInfo, planned_check, verify_file
from llmhost.store.progress import download_progress
from llmhost.store.ranges import DEFAULT_PART_SIZE, ByteRange, coverage_problem, pending_ranges, plan_ranges
from llmhost.store.s3client import S3ModelError, error_code, s3_failures, translate
from llmhost.store.s3uri import S3Ref

log = logging.getLogger("llmhost.store")
DEFAULT_WORKERS = 8
# a range whose transfer fails (connection cut, short body, read timeout) is fetched again this many
# times in all before the download gives up; the waits between tries double from RETRY_BASE_S
RANGE_TRIES = 4
RETRY_BASE_S = 0.25
# whole downloads of an object whose bytes fail the integrity check (bytes changed on the way are not
# changed the same way twice; a store that serves other bytes than it describes fails every time)
ALTERED_TRIES = 2
_CHUNK = 1024 * 1024


class ShortRead(S3ModelError):
    """A range's body ended before its length: the connection was cut."""


class AlteredDownload(S3ModelError):
    """The whole file failed its integrity check: its bytes were changed on the way (deleted)."""


def partial_paths(dest: Path) -> tuple[Path, Path]:
    return dest.with_name(dest.name + ".partial"), dest.with_name(dest.name + ".partial.json")


def load_done(state: Path, etag: str, size: int, part_size: int) -> set[int]:
    """Finished range indexes of an earlier attempt, if it fetched this same object version."""
    try:
        data = json.loads(state.read_text())
    except (OSError, ValueError):
        return set()
    if data.get("etag") != etag or data.get("size") != size or data.get("part_size") != part_size:
        return set()
    return {int(i) for i in data.get("done", [])}


def save_done(state: Path, etag: str, size: int, part_size: int, done: set[int]) -> None:
    tmp = state.with_name(state.name + ".tmp")
    data = json.dumps({"etag": etag, "size": size, "part_size": part_size, "done": sorted(done)}).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)  # the record itself is on disk before it replaces the previous one
    finally:
        os.close(fd)
    os.replace(tmp, state)  # a crash mid-write must not lose the ranges recorded before


def recorded_part_size(state: Path) -> int | None:
    """The range size an earlier attempt used: resuming keeps it, else its ranges would not line up."""
    try:
        value = json.loads(state.read_text()).get("part_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def reserve(fd: int, size: int) -> None:
    """Allocate the file's blocks now: a disk too small fails here, before any byte is fetched, not
    after minutes of download. Filesystems without fallocate get a sparse file of the right size."""
    if size == 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        os.ftruncate(fd, size)


def _prepare(partial: Path, state: Path, etag: str, size: int, part_size: int) -> set[int]:
    done = load_done(state, etag, size, part_size)
    if not partial.is_file() or partial.stat().st_size != size:
        done = set()
    partial.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | (0 if done else os.O_TRUNC), 0o644)
    try:
        reserve(fd, size)  # on resume too: a sparse file of an older version had no blocks reserved
    finally:
        os.close(fd)
    if not done:
        save_done(state, etag, size, part_size, done)
    return done


def _fetch(client: Any, ref: S3Ref, etag: str, r: ByteRange, fd: int, advance: Any) -> None:
    # IfMatch: a new upload replacing the object mid-download fails the part instead of mixing versions
    resp = client.get_object(Bucket=ref.bucket, Key=ref.key, Range=r.header, IfMatch=f'"{etag}"')
    body, offset = resp["Body"], r.start
    try:
        while chunk := body.read(_CHUNK):
            os.pwrite(fd, chunk, offset)
            offset += len(chunk)
            advance(len(chunk))
    except BaseException:
        advance(r.start - offset)  # the retry fetches these bytes again: the bar must not count them twice
        raise
    if offset != r.end + 1:
        advance(r.start - offset)
        raise ShortRead(f"{ref.uri}: range {r.header} returned {offset - r.start} of {r.length} bytes")
    os.fdatasync(fd)  # on disk before the range is recorded as finished


def _transient(exc: BaseException) -> bool:
    """A transfer failure another try may not meet; refusals (403, 412, 404) and local disk errors
    are final."""
    from botocore.exceptions import BotoCoreError, NoCredentialsError, PartialCredentialsError

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return False
    if isinstance(exc, (BotoCoreError, ShortRead, ConnectionError, TimeoutError)):
        return True
    return error_code(exc) in ("500", "503", "InternalError", "SlowDown", "ServiceUnavailable")


def _fetch_with_retries(client: Any, ref: S3Ref, etag: str, r: ByteRange, fd: int, advance: Any) -> None:
    for attempt in range(1, RANGE_TRIES + 1):
        try:
            _fetch(client, ref, etag, r, fd, advance)
            return
        except Exception as exc:
            if not _transient(exc):
                raise
            if attempt == RANGE_TRIES:
                raise S3ModelError(
                    f"{ref.uri}: range {r.header} failed {attempt} time(s), giving up; last: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            wait_s = RETRY_BASE_S * 2 ** (attempt - 1)
            log.warning(
                "%s: range %s failed (%s: %s); try %d of %d in %.2f s",
                ref.uri,
                r.header,
                type(exc).__name__,
                exc,
                attempt + 1,
                RANGE_TRIES,
                wait_s,
            )
            time.sleep(wait_s)


def _on_success(record: Callable[[int], None], index: int) -> Callable[[Future[None]], None]:
    def done(future: Future[None]) -> None:
        if not future.cancelled() and future.exception() is None:
            record(index)

    return done


def _run_parts(
    client: Any,
    ref: S3Ref,
    etag: str,
    todo: list[ByteRange],
    partial: Path,
    record: Any,
    advance: Any,
    workers: int,
) -> None:
    fd = os.open(partial, os.O_WRONLY)
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="s3-part") as pool:
            futures = []
            for r in todo:
                future = pool.submit(_fetch_with_retries, client, ref, etag, r, fd, advance)
                # recorded as each range lands, so even a killed process keeps what it finished
                future.add_done_callback(_on_success(record, r.index))
                futures.append(future)
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:
                f.cancel()
            for f in finished:
                if (exc := f.exception()) is not None:
                    raise exc
    finally:
        os.close(fd)


def _record_each(state: Path, etag: str, size: int, part_size: int, done: set[int]) -> Any:
    lock = threading.Lock()

    def record(index: int) -> None:
        with lock:
            done.add(index)
            save_done(state, etag, size, part_size, done)

    return record


def _verify(
    partial: Path, state: Path, ref: S3Ref, info: ObjectInfo, ranges: list[ByteRange], part_size: int
) -> str:
    # what the state file on disk says, not what this process believes: that is what a resume trusts
    gap = coverage_problem(ranges, load_done(state, info.etag, info.size, part_size), info.size)
    if gap is None and partial.stat().st_size != info.size:
        gap = f"the file holds {partial.stat().st_size} bytes, the object {info.size}"
    if gap is not None:  # nothing is wrong with what landed: the next start resumes
        raise S3ModelError(f"{ref.uri}: download incomplete: {gap}")
    ok, kind = verify_file(partial, info)
    if not ok:
        # the bytes are wrong, not just missing: resuming from them would fail again
        partial.unlink(missing_ok=True)
        state.unlink(missing_ok=True)
        raise AlteredDownload(
            f"{ref.uri}: downloaded file failed its {kind} check (ETag {info.etag}); "
            "the partial download was deleted"
        )
    return kind


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened and synced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def download_object(
    client: Any,
    ref: S3Ref,
    info: ObjectInfo,
    dest: Path,
    *,
    part_size: int | None = None,
    workers: int | None = None,
) -> str:
    """Fetch `ref` into `dest`; returns the integrity check made ("md5", "multipart", "sha256", "crc32",
    "sha1" or "size-only"). A file that fails it is deleted and fetched once more."""
    for attempt in range(1, ALTERED_TRIES + 1):
        try:
            return _download_once(client, ref, info, dest, part_size, workers)
        except AlteredDownload as exc:
            if attempt == ALTERED_TRIES:
                raise
            log.warning("%s; fetching it again (attempt %d of %d)", exc, attempt + 1, ALTERED_TRIES)
    raise AssertionError("unreachable")


def _download_once(
    client: Any, ref: S3Ref, info: ObjectInfo, dest: Path, part_size: int | None, workers: int | None
) -> str:
    # the module defaults are read per call so a deployment (or a test) can tune them in one place
    partial, state = partial_paths(dest)
    part_size = part_size or recorded_part_size(state) or DEFAULT_PART_SIZE
    workers = workers or DEFAULT_WORKERS
    try:
        done = _prepare(partial, state, info.etag, info.size, part_size)
        ranges = plan_ranges(info.size, part_size)
        todo = pending_ranges(ranges, done)
        already = sum(r.length for r in ranges if r.index in done)
        if done:
            log.info("resuming %s: %d of %d ranges already downloaded", ref.uri, len(done), len(ranges))
        with download_progress(ref.uri, info.size, already) as advance:
            record = _record_each(state, info.etag, info.size, part_size, done)
            _run_parts(client, ref, info.etag, todo, partial, record, advance, workers)
        kind = _verify(partial, state, ref, info, ranges, part_size)
        os.replace(partial, dest)
        _fsync_dir(dest.parent)  # the rename itself survives a power loss
    except S3ModelError:
        raise
    except s3_failures() as exc:
        raise translate(exc, ref) from None
    with contextlib.suppress(OSError):
        state.unlink()
    _log_verified(ref, info, kind)
    return kind


def _log_verified(ref: S3Ref, info: ObjectInfo, kind: str) -> None:
    if kind == SIZE_ONLY:
        log.info("verified %s (size-only check: %s)", ref.uri, planned_check(info)[1])
    else:
        log.info("verified %s (%s check)", ref.uri, kind)
