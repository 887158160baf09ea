"""llama.cpp's process-wide setup: the backend initialised once, its log routed to Python's logging
(and to listeners such as the quantizer's progress), and the guard against its AMX weight buffers."""

from __future__ import annotations

import ctypes
import logging
import re
import threading
from collections.abc import Callable
from typing import Any, Self

import llama_cpp as lc

log = logging.getLogger(__name__)

_backend_lock = threading.Lock()
_backend_ready = False


def init_backend() -> None:
    """Initialise llama.cpp once per process (also for model-file tools such as the quantizer)."""
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            _silence_llama_logs()
            lc.llama_backend_init()
            _backend_ready = True


def amx_built() -> bool:
    """Whether this llama.cpp was compiled with Intel AMX kernels (a native build on such a CPU).

    Its AMX weight buffers crash llama_decode with a segfault on Sapphire Rapids for the default
    model (seen with llama-cpp-python 0.3.36; llama.cpp issue #20824 is the same crash, still open),
    so weights are not put there: see `extra_buffers`."""
    return b"AMX_INT8 = 1" in lc.llama_print_system_info()


def extra_buffers(repack: bool) -> bool:
    if repack and amx_built():
        log.warning(
            "llama.cpp was built with AMX kernels, which crash on decode: weights are not repacked "
            "(rebuild llama-cpp-python with CFLAGS/CXXFLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' "
            "to keep the other repacked kernels)"
        )
        return False
    return repack


# callbacks that see every llama.cpp log fragment (e.g. the quantizer's per-tensor progress)
_log_listeners: list[Callable[[str], None]] = []


def add_log_listener(fn: Callable[[str], None]) -> None:
    _log_listeners.append(fn)


def remove_log_listener(fn: Callable[[str], None]) -> None:
    if fn in _log_listeners:
        _log_listeners.remove(fn)


class LogWatch:
    """Reads llama.cpp's log lines while attached (`with`): what its API does not tell."""

    def __enter__(self) -> Self:
        add_log_listener(self._seen)
        return self

    def __exit__(self, *_: object) -> None:
        remove_log_listener(self._seen)

    def _seen(self, text: str) -> None:
        raise NotImplementedError


class KvBufferTally(LogWatch):
    """The MiB of KV buffers llama.cpp reports allocating while it is attached (one line per cache: a
    model with sliding-window layers has two, their sizes known only to llama.cpp)."""

    _LINE = re.compile(r"KV buffer size =\s*([0-9.]+) MiB")

    def __init__(self) -> None:
        self.mib = 0.0

    def _seen(self, text: str) -> None:
        found = self._LINE.search(text)
        if found:
            self.mib += float(found.group(1))


class SwaLayerTally(LogWatch):
    """How many of a model's layers have a sliding window, from the line llama.cpp logs (at debug
    level) for each layer it loads (the output layer too, never windowed): its API gives the window,
    not which layers use it."""

    _LINE = re.compile(r"assigned to device .*is_swa = ([01])")

    def __init__(self) -> None:
        self.layers = 0
        self.swa = 0

    def _seen(self, text: str) -> None:
        found = self._LINE.search(text)
        if found:
            self.layers += 1
            self.swa += found.group(1) == "1"


def _log(level: int, text: bytes, _user: Any) -> None:
    for listener in list(_log_listeners):
        try:
            listener(text.decode("utf-8", "replace"))
        except Exception:  # a listener must never raise into llama.cpp
            log.exception("llama.cpp log listener failed")
    # llama.cpp logs every tensor at load: keep it out of the server log unless debugging
    if log.isEnabledFor(logging.DEBUG):
        msg = text.decode("utf-8", "replace").rstrip()
        if msg:
            log.debug("llama.cpp[%d]: %s", level, msg)


# kept at module level: llama.cpp holds the pointer for the life of the process
_log_callback: Any = lc.llama_log_callback(_log)


def _silence_llama_logs() -> None:
    lc.llama_log_set(_log_callback, ctypes.c_void_p(0))
