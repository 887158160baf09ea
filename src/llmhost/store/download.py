"""Parallel ranged download of one S3 object, resumable, verified, then published atomically.

While it runs the bytes live in `<name>.partial` and the finished ranges in `<name>.partial.json`;
only a verified file is renamed to `<name>`, so a reader never sees a half-written model.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from llmhost.store.progress import download_progress
from llmhost.store.ranges import DEFAULT_PART_SIZE, ByteRange, pending_ranges, plan_ranges, verify_etag
from llmhost.store.s3client import S3ModelError, s3_failures, translate
from llmhost.store.s3uri import S3Ref

log = logging.getLogger("llmhost.store")
DEFAULT_WORKERS = 8
_CHUNK = 1024 * 1024


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
    tmp.write_text(json.dumps({"etag": etag, "size": size, "part_size": part_size, "done": sorted(done)}))
    os.replace(tmp, state)  # a crash mid-write must not lose the ranges recorded before


def recorded_part_size(state: Path) -> int | None:
    """The range size an earlier attempt used: resuming keeps it, else its ranges would not line up."""
    try:
        value = json.loads(state.read_text()).get("part_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _prepare(partial: Path, state: Path, etag: str, size: int, part_size: int) -> set[int]:
    done = load_done(state, etag, size, part_size)
    if not partial.is_file() or partial.stat().st_size != size:
        done = set()
    if not done:
        partial.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("wb") as f:
            f.truncate(size)
        save_done(state, etag, size, part_size, done)
    return done


def _fetch(client: Any, ref: S3Ref, etag: str, r: ByteRange, fd: int, advance: Any) -> None:
    # IfMatch: a new upload replacing the object mid-download fails the part instead of mixing versions
    resp = client.get_object(Bucket=ref.bucket, Key=ref.key, Range=r.header, IfMatch=f'"{etag}"')
    body, offset = resp["Body"], r.start
    while chunk := body.read(_CHUNK):
        os.pwrite(fd, chunk, offset)
        offset += len(chunk)
        advance(len(chunk))
    if offset != r.end + 1:
        raise S3ModelError(f"{ref.uri}: range {r.header} returned {offset - r.start} of {r.length} bytes")


def _on_success(record: Callable[[int], None], index: int) -> Callable[[Future[None]], None]:
    def done(future: Future[None]) -> None:
        if not future.cancelled() and future.exception() is None:
            record(index)

    return done


def _run_parts(client: Any, ref: S3Ref, etag: str, todo: list[ByteRange], partial: Path,
               record: Any, advance: Any, workers: int) -> None:
    fd = os.open(partial, os.O_WRONLY)
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="s3-part") as pool:
            futures = []
            for r in todo:
                future = pool.submit(_fetch, client, ref, etag, r, fd, advance)
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


def _verify(partial: Path, state: Path, ref: S3Ref, etag: str, size: int, upload_part: int | None) -> str:
    actual = partial.stat().st_size
    ok, kind = (actual == size, "size") if actual != size else verify_etag(partial, etag, upload_part)
    if not ok:
        # the bytes are wrong, not just missing: resuming from them would fail again
        partial.unlink(missing_ok=True)
        state.unlink(missing_ok=True)
        raise S3ModelError(f"{ref.uri}: downloaded file failed its {kind} check against ETag {etag}")
    return kind


def download_object(client: Any, ref: S3Ref, size: int, etag: str, dest: Path, *,
                    upload_part_size: int | None = None, part_size: int | None = None,
                    workers: int | None = None) -> str:
    """Fetch `ref` into `dest`; returns the integrity check made ("md5", "multipart", "size-only")."""
    # the module defaults are read per call so a deployment (or a test) can tune them in one place
    partial, state = partial_paths(dest)
    part_size = part_size or recorded_part_size(state) or DEFAULT_PART_SIZE
    workers = workers or DEFAULT_WORKERS
    try:
        done = _prepare(partial, state, etag, size, part_size)
        ranges = plan_ranges(size, part_size)
        todo = pending_ranges(ranges, done)
        already = sum(r.length for r in ranges if r.index in done)
        if done:
            log.info("resuming %s: %d of %d ranges already downloaded", ref.uri, len(done), len(ranges))
        with download_progress(ref.uri, size, already) as advance:
            record = _record_each(state, etag, size, part_size, done)
            _run_parts(client, ref, etag, todo, partial, record, advance, workers)
        kind = _verify(partial, state, ref, etag, size, upload_part_size)
        os.replace(partial, dest)
    except S3ModelError:
        raise
    except s3_failures() as exc:
        raise translate(exc, ref) from None
    with contextlib.suppress(OSError):
        state.unlink()
    log.info("verified %s (%s check)", ref.uri, kind)
    return kind
