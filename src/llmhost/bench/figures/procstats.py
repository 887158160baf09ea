"""Where a measured configuration's CPU time went: the server process it started (the router of an
endpoint, or a single `llmhost serve`), each of its children (an endpoint's copies) and the load
generator itself, over the measured levels, with each one's resident memory at the end.

This is what tells a router's cost from the copies' work, and what `llmhost tune` sizes an endpoint
file's ``memory_mb`` on; psutil reads it from the kernel.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import psutil
from typing_extensions import TypedDict


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def _host_busy_s() -> float:
    """CPU seconds the whole host has spent busy (all CPUs: neither idle nor waiting for I/O)."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


class ProcessFigures(TypedDict):
    pid: int
    cpu_s: float  # CPU seconds over the levels
    cpus: float  # CPUs used on average
    rss_mb: float  # resident MiB at the end


class LoadGenerator(TypedDict):
    cpu_s: float
    cpus: float


class Processes(TypedDict):
    """What a server, its children and the load generator used over a run's levels."""

    wall_s: float
    host_cpus: int
    other_cpus: float  # the CPUs every other process of the host used on average meanwhile
    server: ProcessFigures | None
    children: list[ProcessFigures]
    load_generator: LoadGenerator


@dataclass
class ProcessUsage:
    """CPU seconds of a process tree and of this process since :meth:`start`."""

    root: psutil.Process
    started_cpu: dict[int, float] = field(default_factory=dict)  # pid → CPU seconds at start
    own_cpu0: float = 0.0
    wall0: float = 0.0
    host_busy0: float = 0.0

    @classmethod
    def start(cls, pid: int) -> ProcessUsage:
        usage = cls(
            psutil.Process(pid),
            own_cpu0=time.process_time(),
            wall0=time.monotonic(),
            host_busy0=_host_busy_s(),
        )
        for p in _tree(usage.root):
            try:
                usage.started_cpu[p.pid] = _cpu_s(p)
            except psutil.Error:
                continue
        return usage

    def _entry(self, p: psutil.Process, wall: float) -> ProcessFigures | None:
        try:
            cpu = _cpu_s(p) - self.started_cpu.get(p.pid, 0.0)  # a process started since: all of it
            rss = p.memory_info().rss / 2**20
        except psutil.Error:
            return None
        return {"pid": p.pid, "cpu_s": round(cpu, 3), "cpus": round(cpu / wall, 3), "rss_mb": round(rss, 1)}

    def finish(self) -> Processes:
        """``server`` (the root), ``children`` and ``load_generator``: CPU seconds, CPUs used on
        average (``cpus``), resident MiB; with the wall time, the host's CPUs, and ``other_cpus``: the
        CPUs every other process of the host used on average meanwhile (the machine was idle or not)."""
        wall = max(time.monotonic() - self.wall0, 1e-9)
        entries = [self._entry(p, wall) for p in _tree(self.root)]
        server, *children = entries or [None]
        own = time.process_time() - self.own_cpu0
        ours = own + sum(e["cpu_s"] for e in entries if e is not None)
        others = max(0.0, _host_busy_s() - self.host_busy0 - ours) / wall
        return {
            "wall_s": round(wall, 2),
            "host_cpus": len(os.sched_getaffinity(0)),
            "other_cpus": round(others, 3),
            "server": server,
            "children": [c for c in children if c is not None],
            "load_generator": {"cpu_s": round(own, 3), "cpus": round(own / wall, 3)},
        }
