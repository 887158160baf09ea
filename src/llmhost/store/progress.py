"""Download progress on stderr: a rich bar on a terminal, a few plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("llmhost.store")


@contextmanager
def download_progress(description: str, total: int, already: int = 0) -> Iterator[Callable[[int], None]]:
    """Yields `advance(nbytes)`; safe to call from the download threads."""
    log.info("downloading %s (%.1f MB, %.1f MB already here)", description, total / 1e6, already / 1e6)
    if not sys.stderr.isatty():
        # redrawn bars would fill a captured log with control characters: log quarter steps instead
        yield quarter_logger(description, total, already)
        log.info("downloaded %s", description)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=total, completed=already)
        yield lambda n: bar.advance(task, n)


def quarter_logger(description: str, total: int, already: int) -> Callable[[int], None]:
    lock = threading.Lock()
    state = {"done": already, "next": 25}

    def advance(n: int) -> None:
        with lock:
            state["done"] += n
            pct = 100 * state["done"] // max(total, 1)
            if pct >= state["next"] and pct < 100:
                log.info("downloading %s: %d%%", description, pct)
                state["next"] = (pct // 25 + 1) * 25

    return advance
