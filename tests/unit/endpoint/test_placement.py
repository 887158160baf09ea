"""Placement: dedicated CPUs, shared cores for fractions, memory reservations, refusals that explain."""

from __future__ import annotations

import pytest

from llmhost.endpoint.control.placement import (
    InsufficientCapacityError,
    Ledger,
    available_cpu_ids,
    can_place,
    mem_available_mb,
    place,
    release,
    router_cpu_ids,
)
from llmhost.endpoint.spec import ResourcesSpec


def res(num_cpus: float = 1, memory_mb: int = 100) -> ResourcesSpec:
    return ResourcesSpec(num_cpus=num_cpus, memory_mb=memory_mb)


def test_whole_cpus_are_disjoint_and_threads_follow() -> None:
    ledger = Ledger(cpus=[0, 1, 2, 3], memory_mb=10_000)
    a = place(ledger, "a", res(2))
    b = place(ledger, "b", res(1))
    c = place(ledger, "b", res(1))
    assert a.cpus == (0, 1) and a.threads == 2
    assert {b.cpus, c.cpus} == {(2,), (3,)}
    assert set(a.cpus).isdisjoint(b.cpus) and set(b.cpus).isdisjoint(c.cpus)
    assert ledger.reserved_mb == 300
    with pytest.raises(InsufficientCapacityError, match="needs 1 dedicated CPU"):
        place(ledger, "c", res(1))


def test_fractions_share_a_core_but_never_a_dedicated_one() -> None:
    ledger = Ledger(cpus=[0, 1], memory_mb=10_000)
    whole = place(ledger, "w", res(1))
    halves = [place(ledger, "h", res(0.5)) for _ in range(2)]
    assert whole.cpus == (0,)
    assert [h.cpus for h in halves] == [(1,), (1,)]  # the two halves fill core 1
    assert all(h.threads == 1 and h.share == 0.5 for h in halves)
    assert can_place(ledger, [("h", res(0.5), 1)]) is not None  # nothing left
    release(ledger, halves[0])
    assert place(ledger, "q", res(0.25)).cpus == (1,)  # best fit: the half-used core


def test_fraction_takes_a_free_core_when_shared_ones_are_full() -> None:
    ledger = Ledger(cpus=[0, 1, 2], memory_mb=10_000)
    assert [place(ledger, "x", res(0.4)).cpus for _ in range(3)] == [(0,), (0,), (1,)]
    # a whole copy cannot land on a partly used core
    assert place(ledger, "w", res(1)).cpus == (2,)
    assert "needs 1 dedicated CPU(s), 0 of 3 CPUs are free" in (can_place(ledger, [("w", res(1), 1)]) or "")


def test_over_capacity_names_what_is_short_and_changes_nothing() -> None:
    ledger = Ledger(cpus=[0, 1], memory_mb=1_000)
    reason = can_place(ledger, [("a", res(1), 1), ("b", res(1), 2)])
    assert reason is not None
    assert "insufficient capacity: component 'b' copy 2 of 2 needs 1 dedicated CPU(s)" in reason
    assert "0 of 2 CPUs are free" in reason and "0,1" in reason
    assert ledger.used == {} and ledger.reserved_mb == 0
    mem = can_place(ledger, [("big", res(0.5, memory_mb=600), 2)])
    assert mem is not None and "needs memory_mb=600, 400 MB of 1000 MB available are unreserved" in mem
    assert can_place(ledger, [("a", res(1, 500), 1), ("b", res(1, 500), 1)]) is None


def test_release_frees_cpus_and_memory() -> None:
    ledger = Ledger(cpus=[0], memory_mb=500)
    a = place(ledger, "a", res(1, 500))
    with pytest.raises(InsufficientCapacityError):
        place(ledger, "b", res(1, 100))
    release(ledger, a)
    assert ledger.free_cpus() == [0] and ledger.reserved_mb == 0
    assert place(ledger, "b", res(1, 100)).cpus == (0,)


def test_host_ledger_reads_affinity_and_meminfo() -> None:
    ledger = Ledger.from_host()
    assert ledger.cpus and ledger.memory_mb > 0
    assert mem_available_mb("/nonexistent") == 0


def test_router_cpus_are_the_last_ones_and_never_given_to_copies() -> None:
    cpus = available_cpu_ids()
    assert router_cpu_ids(0) == [] and Ledger.from_host(0).cpus == cpus
    if len(cpus) > 1:
        assert router_cpu_ids(1) == cpus[-1:]
        ledger = Ledger.from_host(1)
        assert ledger.cpus == cpus[:-1]
        wanted = [("x", res(1), len(cpus))]  # a copy per CPU: one too many once the router keeps one
        assert "insufficient capacity" in (can_place(ledger, wanted) or "")
    with pytest.raises(InsufficientCapacityError, match=r"router\.num_cpus"):
        router_cpu_ids(len(cpus))  # nothing left for copies
