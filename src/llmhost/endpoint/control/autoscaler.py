"""Target tracking on concurrent requests per copy: a pure decision, then a loop applying it.

`decide` takes what was observed and when, and returns the copies wanted plus the state to carry;
it starts and stops nothing, so it is tested without processes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llmhost.endpoint.spec import AutoscalingSpec


@dataclass(frozen=True)
class Observation:
    now: float  # monotonic seconds
    copies: int  # copies counted toward capacity: starting, ready or restarting (not draining)
    concurrent: float  # peak requests in flight at the router since the last observation
    waiting: int = 0  # requests waiting because the component has no ready copy


@dataclass(frozen=True)
class ScalerState:
    last_scale_out: float = -math.inf
    last_scale_in: float = -math.inf
    low_since: float | None = None  # when the load first asked for fewer copies than there are


@dataclass(frozen=True)
class Decision:
    desired: int
    state: ScalerState
    reason: str


def target_copies(policy: AutoscalingSpec, concurrent: float, waiting: int = 0) -> int:
    """ceil(concurrent / target), within [min, max]; any request in flight or waiting needs one copy."""
    want = math.ceil(concurrent / policy.target_concurrent_per_copy - 1e-9) if concurrent > 0 else 0
    if (concurrent > 0 or waiting > 0) and want < 1:
        want = 1
    return max(policy.min_copies, min(policy.max_copies, want))


def decide(policy: AutoscalingSpec, obs: Observation, state: ScalerState) -> Decision:
    want = target_copies(policy, obs.concurrent, obs.waiting)
    if want > obs.copies:
        state = replace(state, low_since=None)
        if obs.copies == 0:  # scale from zero: a request waits, no cooldown applies
            return Decision(want, replace(state, last_scale_out=obs.now), "scale from zero")
        if obs.now - state.last_scale_out < policy.scale_out_cooldown_s:
            return Decision(obs.copies, state, "scale-out cooldown")
        return Decision(
            want,
            replace(state, last_scale_out=obs.now),
            f"{obs.concurrent:g} concurrent > {policy.target_concurrent_per_copy:g} x {obs.copies} copies",
        )
    if want < obs.copies:
        low_since = state.low_since if state.low_since is not None else obs.now
        state = replace(state, low_since=low_since)
        last_scale = max(state.last_scale_out, state.last_scale_in)
        cooldown = policy.scale_in_cooldown_s
        if obs.now - low_since < cooldown or obs.now - last_scale < cooldown:
            return Decision(obs.copies, state, "scale-in cooldown")
        return Decision(
            want,
            replace(state, last_scale_in=obs.now, low_since=None),
            f"{obs.concurrent:g} concurrent for {obs.copies} copies, low for {obs.now - low_since:.1f} s",
        )
    return Decision(obs.copies, replace(state, low_since=None), "on target")
