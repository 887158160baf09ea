"""Ctrl-C for the long commands (`bench run`, `bench sweep`, `tune`): stop, keep what was measured.

The loop installs its own SIGINT handler rather than waiting for Python's KeyboardInterrupt: a process
started in the background by a non-interactive shell inherits SIGINT ignored, Python then installs no
handler of its own, and Ctrl-C (or a supervisor's SIGINT) would be lost."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_interruptible(
    main: Coroutine[Any, Any, T], on_interrupt: Callable[[], None] = lambda: None
) -> tuple[T | None, bool]:
    """Run `main` to completion: (its result, False); or, on SIGINT, call `on_interrupt`, cancel it and
    answer (None, True). A run that finished despite a SIGINT during it answers (result, True)."""
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        if not interrupted:
            interrupted = True
            on_interrupt()

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_sigint() -> None:
            interrupt()
            task.cancel()

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (ValueError, RuntimeError):  # not the main thread: KeyboardInterrupt, if any, as before
            return await main
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    try:
        return asyncio.run(guarded()), interrupted
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupt()
        return None, True
