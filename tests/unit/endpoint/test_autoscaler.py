"""Autoscaling decisions, without processes: target tracking, bounds, cooldowns, scale from zero."""

from __future__ import annotations

from llmhost.endpoint.control.autoscaler import Observation, ScalerState, decide, target_copies
from llmhost.endpoint.spec import AutoscalingSpec

POLICY = AutoscalingSpec(
    min_copies=1, max_copies=4, target_concurrent_per_copy=4, scale_in_cooldown_s=60, scale_out_cooldown_s=10
)


def test_target_copies_tracks_concurrency_within_bounds() -> None:
    assert target_copies(POLICY, 0) == 1  # min
    assert target_copies(POLICY, 4) == 1
    assert target_copies(POLICY, 5) == 2
    assert target_copies(POLICY, 12) == 3
    assert target_copies(POLICY, 100) == 4  # max
    zero = AutoscalingSpec(min_copies=0, max_copies=2, target_concurrent_per_copy=4)
    assert target_copies(zero, 0) == 0
    assert target_copies(zero, 0.5) == 1
    assert target_copies(zero, 0, waiting=1) == 1


def test_scale_out_then_cooldown() -> None:
    d = decide(POLICY, Observation(now=100, copies=1, concurrent=9), ScalerState())
    assert d.desired == 3 and d.state.last_scale_out == 100
    d2 = decide(POLICY, Observation(now=105, copies=3, concurrent=16), d.state)
    assert d2.desired == 3 and d2.reason == "scale-out cooldown"
    d3 = decide(POLICY, Observation(now=110, copies=3, concurrent=16), d2.state)
    assert d3.desired == 4


def test_scale_in_waits_for_sustained_low_load_and_cooldown() -> None:
    state = ScalerState(last_scale_out=0)
    d = decide(POLICY, Observation(now=30, copies=3, concurrent=1), state)
    assert d.desired == 3 and d.state.low_since == 30  # too soon after the scale out, and just went low
    d = decide(POLICY, Observation(now=80, copies=3, concurrent=1), d.state)
    assert d.desired == 3  # low for 50 s only
    d = decide(POLICY, Observation(now=91, copies=3, concurrent=1), d.state)
    assert d.desired == 1 and d.state.last_scale_in == 91 and d.state.low_since is None


def test_a_burst_resets_the_scale_in_clock() -> None:
    d = decide(POLICY, Observation(now=100, copies=2, concurrent=0), ScalerState())
    assert d.state.low_since == 100
    d = decide(POLICY, Observation(now=130, copies=2, concurrent=8), d.state)
    assert d.desired == 2 and d.state.low_since is None
    d = decide(POLICY, Observation(now=150, copies=2, concurrent=0), d.state)
    assert d.desired == 2 and d.state.low_since == 150


def test_scale_from_zero_ignores_cooldowns_and_scale_to_zero_waits() -> None:
    policy = AutoscalingSpec(
        min_copies=0,
        max_copies=2,
        target_concurrent_per_copy=1,
        scale_in_cooldown_s=5,
        scale_out_cooldown_s=60,
    )
    state = ScalerState(last_scale_out=99, last_scale_in=99)
    d = decide(policy, Observation(now=100, copies=0, concurrent=1, waiting=1), state)
    assert d.desired == 1 and d.reason == "scale from zero"
    d = decide(policy, Observation(now=101, copies=1, concurrent=0), d.state)
    assert d.desired == 1  # low since 101
    d = decide(policy, Observation(now=106.5, copies=1, concurrent=0), d.state)
    assert d.desired == 0


def test_on_target_holds() -> None:
    d = decide(POLICY, Observation(now=1, copies=2, concurrent=6), ScalerState(low_since=0.5))
    assert d.desired == 2 and d.reason == "on target" and d.state.low_since is None
