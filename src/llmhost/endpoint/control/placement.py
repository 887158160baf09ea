"""Placement: which CPUs and how much memory each copy gets, refused up front when it does not fit.

The ledger holds the CPUs this process may run on (affinity) and the memory available when the
endpoint started. A copy asking for 1 or more CPUs gets that many whole CPUs no other copy uses; a
copy asking for a fraction shares one core with other fractional copies, up to 1.0 per core.
Memory is a reservation (`memory_mb` per copy) against MemAvailable, not a measurement.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from llmhost.endpoint.spec import ResourcesSpec
from llmhost.errors import ConflictError

EPS = 1e-9


class InsufficientCapacityError(ConflictError, RuntimeError):
    """The copies asked for do not fit on this host; the message says what is short."""


@dataclass(frozen=True)
class Allocation:
    cpus: tuple[int, ...]
    share: float  # of those CPUs: 1.0 each for whole CPUs, the fraction for a shared core
    threads: int
    memory_mb: int

    @property
    def cpu_list(self) -> str:
        return ",".join(str(c) for c in self.cpus)


def available_cpu_ids() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def router_cpu_ids(n: int) -> list[int]:
    """The last ``n`` CPUs this process may use, kept for the router; refused when none is left."""
    cpus = available_cpu_ids()
    if n >= len(cpus):
        raise InsufficientCapacityError(
            f"insufficient capacity: router.num_cpus {n} leaves none of the {len(cpus)} CPUs "
            f"({','.join(map(str, cpus))}) for copies"
        )
    return cpus[len(cpus) - n :] if n else []


def mem_available_mb(meminfo: str = "/proc/meminfo") -> int:
    """MemAvailable, or MemFree + Cached where the kernel is too old to report it."""
    values: dict[str, int] = {}
    try:
        with open(meminfo) as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    values[key] = int(parts[0])  # kB
    except OSError:
        return 0
    kb = values.get("MemAvailable", values.get("MemFree", 0) + values.get("Cached", 0))
    return kb // 1024


@dataclass
class Ledger:
    cpus: list[int]
    memory_mb: int
    used: dict[int, float] = field(default_factory=dict)  # cpu -> share in use (0..1)
    whole: set[int] = field(default_factory=set)  # CPUs held whole by one copy
    reserved_mb: int = 0

    @classmethod
    def from_host(cls, router_cpus: int = 0) -> Ledger:
        """This process's CPUs less the last ``router_cpus`` (see :func:`router_cpu_ids`)."""
        cpus = available_cpu_ids()
        return cls(cpus=cpus[: len(cpus) - router_cpus], memory_mb=mem_available_mb())

    def free_cpus(self) -> list[int]:
        return [c for c in self.cpus if self.used.get(c, 0.0) <= EPS]

    def free_share(self) -> float:
        return sum(1.0 - self.used.get(c, 0.0) for c in self.cpus if c not in self.whole)

    @property
    def free_memory_mb(self) -> int:
        return self.memory_mb - self.reserved_mb

    def copy(self) -> Ledger:
        return Ledger(list(self.cpus), self.memory_mb, dict(self.used), set(self.whole), self.reserved_mb)


def _pick(ledger: Ledger, res: ResourcesSpec) -> Allocation | None:
    """The CPUs one copy would get, or None when no CPUs fit (memory is checked by the caller)."""
    if res.num_cpus >= 1:
        n = int(res.num_cpus)
        free = ledger.free_cpus()
        if len(free) < n:
            return None
        return Allocation(tuple(free[:n]), 1.0, res.threads, res.memory_mb)
    # fractional: best fit among cores already shared, else a free core
    shared = [
        c
        for c in ledger.cpus
        if c not in ledger.whole and EPS < ledger.used.get(c, 0.0) <= 1 + EPS - res.num_cpus
    ]
    if shared:
        best = max(shared, key=lambda c: (ledger.used[c], -c))
        return Allocation((best,), res.num_cpus, res.threads, res.memory_mb)
    free = ledger.free_cpus()
    if not free:
        return None
    return Allocation((free[0],), res.num_cpus, res.threads, res.memory_mb)


def _take(ledger: Ledger, alloc: Allocation) -> None:
    for c in alloc.cpus:
        ledger.used[c] = ledger.used.get(c, 0.0) + alloc.share
        if alloc.share >= 1.0 - EPS:
            ledger.whole.add(c)
    ledger.reserved_mb += alloc.memory_mb


def release(ledger: Ledger, alloc: Allocation) -> None:
    for c in alloc.cpus:
        left = ledger.used.get(c, 0.0) - alloc.share
        if left <= EPS:
            ledger.used.pop(c, None)
            ledger.whole.discard(c)
        else:
            ledger.used[c] = left
    ledger.reserved_mb -= alloc.memory_mb


def _shortage(ledger: Ledger, requests: Sequence[tuple[str, ResourcesSpec, int]]) -> str | None:
    """Place on a scratch ledger; the first request that does not fit explains the shortage."""
    scratch = ledger.copy()
    for name, res, count in requests:
        for i in range(count):
            alloc = _pick(scratch, res)
            what = f"component {name!r} copy {i + 1} of {count}"
            if alloc is None:
                if res.num_cpus >= 1:
                    return (
                        f"insufficient capacity: {what} needs {int(res.num_cpus)} dedicated CPU(s), "
                        f"{len(scratch.free_cpus())} of {len(scratch.cpus)} CPUs are free "
                        f"(CPUs this process may use: {','.join(map(str, scratch.cpus))})"
                    )
                return (
                    f"insufficient capacity: {what} needs {res.num_cpus} of a CPU, "
                    f"no shared core has that much left and no CPU is free "
                    f"({len(scratch.cpus)} CPUs)"
                )
            if scratch.free_memory_mb < res.memory_mb:
                return (
                    f"insufficient capacity: {what} needs memory_mb={res.memory_mb}, "
                    f"{max(0, scratch.free_memory_mb)} MB of {scratch.memory_mb} MB available are unreserved"
                )
            _take(scratch, alloc)
    return None


def can_place(ledger: Ledger, requests: Sequence[tuple[str, ResourcesSpec, int]]) -> str | None:
    """None when all `(component, resources, copies)` fit together, else what is short."""
    return _shortage(ledger, requests)


def place(ledger: Ledger, name: str, res: ResourcesSpec) -> Allocation:
    """Reserve CPUs and memory for one copy of `name`, or raise InsufficientCapacityError."""
    reason = _shortage(ledger, [(name, res, 1)])
    if reason is not None:
        raise InsufficientCapacityError(reason)
    alloc = _pick(ledger, res)
    assert alloc is not None
    _take(ledger, alloc)
    return alloc
