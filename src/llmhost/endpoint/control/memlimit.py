"""A copy's memory limit (`max_memory_mb`, else its `memory_mb` reservation), enforced by the kernel
wherever the host allows it.

In order of preference:
  cgroup-v2   a child group with memory.max (needs the memory controller delegated to our group's
              children; a group holding processes cannot delegate it, the "no internal processes"
              rule, so this works where the endpoint runs in a group of its own, e.g. a systemd unit
              with Delegate=yes or a container)
  cgroup-v1   a child group of our memory-controller group with memory.limit_in_bytes (and no swap)
  rss-watch   no kernel limit: the supervisor polls the copy's resident memory less its mapped files'
              pages (psutil: what a kernel limit could not reclaim) and kills it when over

The copy's process joins its group between fork and exec (`procs_file`), so it never runs unlimited.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger("llmhost.endpoint")

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class MemoryLimit:
    mechanism: str  # "cgroup-v2", "cgroup-v1" or "rss-watch"
    max_mb: int
    group: Path | None = None
    setting: str = "max_memory_mb"  # the setting the limit comes from: max_memory_mb or memory_mb

    @property
    def named(self) -> str:
        """The limit as the endpoint file states it, for a copy's failure reason."""
        return f"{self.setting}={self.max_mb}"

    @property
    def kernel(self) -> bool:
        return self.group is not None

    @property
    def procs_file(self) -> str | None:
        return str(self.group / "cgroup.procs") if self.group is not None else None

    def oom_kills(self) -> int:
        """How many times the kernel killed a process of the group for memory (0 without a group)."""
        if self.group is None:
            return 0
        events = "memory.events" if self.mechanism == "cgroup-v2" else "memory.oom_control"
        try:
            for line in (self.group / events).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            return 0
        return 0

    def over(self, pid: int) -> float | None:
        """What the copy holds in MB, when the supervisor must enforce the limit itself and it is over:
        its RSS less its resident file pages. A kernel limit charges a copy's file pages too, but drops
        the clean ones before it kills; counting them here killed a copy that a kernel limit keeps. At
        Llama 3.1 8B's shape (Q4_K_M, 8 x 2,048 f16 KV) a copy held RSS 10,046 MiB after loading, 4,684 of
        them the mapped GGUF's pages (read once where llama.cpp repacks the weights into a copy of its
        own), against a memory_mb estimate of about 7,040."""
        if self.group is not None:
            return None
        try:
            info = psutil.Process(pid).memory_info()
        except psutil.Error:
            return None
        held = (info.rss - getattr(info, "shared", 0)) / 2**20  # `shared`: resident file pages (Linux)
        return held if held > self.max_mb else None

    def remove(self) -> None:
        if self.group is not None:
            with contextlib.suppress(OSError):
                self.group.rmdir()


def memory_limit(name: str, max_mb: int, setting: str = "max_memory_mb") -> MemoryLimit:
    """The best mechanism this host offers for a limit of `max_mb` (from `setting`) on the copy `name`."""
    for make in (_cgroup_v2, _cgroup_v1):
        try:
            limit = make(name, max_mb)
        except OSError as exc:
            log.info("copy %s: %s memory limit unavailable (%s)", name, make.__name__.strip("_"), exc)
            continue
        if limit is not None:
            return dataclasses.replace(limit, setting=setting)
    log.info("copy %s: no kernel memory limit on this host; watching RSS instead", name)
    return MemoryLimit("rss-watch", max_mb, setting=setting)


def _own_group(controller: str) -> Path | None:
    """This process's group: the unified (v2) one for controller "", else the v1 controller's."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (controller == "" and controllers == "") or controller in controllers.split(","):
            return Path(path.strip().lstrip("/"))
    return None


def _child(base: Path, name: str) -> Path:
    path = base / f"llmhost-{name}-{os.getpid()}"
    path.mkdir(exist_ok=True)
    return path


def _cgroup_v2(name: str, max_mb: int) -> MemoryLimit | None:
    own = _own_group("")
    if own is None or not (CGROUP_ROOT / "cgroup.controllers").exists():
        return None
    base = CGROUP_ROOT / own
    if "memory" not in (base / "cgroup.subtree_control").read_text().split():
        (base / "cgroup.subtree_control").write_text("+memory")  # EBUSY where base holds processes
    group = _child(base, name)
    try:
        (group / "memory.max").write_text(str(max_mb * 2**20))
        with contextlib.suppress(OSError):
            (group / "memory.swap.max").write_text("0")
    except OSError:
        group.rmdir()
        raise
    return MemoryLimit("cgroup-v2", max_mb, group)


def _cgroup_v1(name: str, max_mb: int) -> MemoryLimit | None:
    own = _own_group("memory")
    root = CGROUP_ROOT / "memory"
    if own is None or not (root / "memory.limit_in_bytes").exists():
        return None
    group = _child(root / own, name)
    try:
        (group / "memory.limit_in_bytes").write_text(str(max_mb * 2**20))
        # memory + swap: the same, i.e. no swap (set after the memory limit, which it may not undercut)
        with contextlib.suppress(OSError):
            (group / "memory.memsw.limit_in_bytes").write_text(str(max_mb * 2**20))
    except OSError:
        group.rmdir()
        raise
    return MemoryLimit("cgroup-v1", max_mb, group)
