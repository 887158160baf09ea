"""What a server process started by llmhost runs between fork and exec to end with its starter: an
endpoint's copies and a sweep's or tune's candidate servers, each in a session of its own (out of the
terminal's reach), would otherwise outlive a starter that was killed."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import signal
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent() -> Callable[[], None]:
    """The call a child makes to get SIGTERM when the process that started it dies. libc is loaded
    here, in the parent: between fork and exec the child only makes the call."""
    return functools.partial(_libc().prctl, PR_SET_PDEATHSIG, signal.SIGTERM)
