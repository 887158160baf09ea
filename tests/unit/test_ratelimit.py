"""The token buckets of per-key quotas, on an injected clock."""

from __future__ import annotations

import pytest

from llmhost.web.ratelimit import Bucket, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_minute_can_be_spent_at_once_then_one_every_sixtieth() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    assert all(limiter.take("alice", "requests", 5, 1).allowed for _ in range(5))
    refused = limiter.take("alice", "requests", 5, 1)
    assert not refused.allowed and refused.retry_after_s == pytest.approx(12.0)
    assert refused.level.remaining == 0 and refused.level.reset_s == pytest.approx(60.0)
    clock.now += 11.9
    assert not limiter.take("alice", "requests", 5, 1).allowed
    clock.now += 0.2
    assert limiter.take("alice", "requests", 5, 1).allowed
    clock.now += 3600
    assert limiter.level("alice", "requests", 5).remaining == 5  # full again, never above


def test_keys_and_what_they_count_are_apart() -> None:
    limiter = RateLimiter(Clock())
    assert limiter.take("alice", "requests", 1, 1).allowed
    assert not limiter.take("alice", "requests", 1, 1).allowed
    assert limiter.take("bob", "requests", 1, 1).allowed
    assert limiter.take("alice", "tokens", 100, 60).allowed


def test_more_than_a_minute_holds_is_never_allowed() -> None:
    decision = RateLimiter(Clock()).take("alice", "tokens", 100, 101)
    assert not decision.allowed and decision.retry_after_s is None


def test_an_estimate_is_settled_and_a_debt_waits() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    assert limiter.take("alice", "tokens", 600, 500).allowed  # prompt + max_tokens
    limiter.adjust("alice", "tokens", 600, 400)  # it used 100
    assert limiter.level("alice", "tokens", 600).remaining == 500
    limiter.adjust("alice", "tokens", 600, -700)  # a correction past zero: owed
    assert limiter.level("alice", "tokens", 600).remaining == 0
    refused = limiter.take("alice", "tokens", 600, 10)
    assert refused.retry_after_s == pytest.approx(21.0)  # 200 owed + 10, at 10 a second
    limiter.adjust("alice", "tokens", 600, 10_000)
    assert limiter.level("alice", "tokens", 600).remaining == 600


def test_a_new_limit_keeps_what_was_spent() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    assert limiter.take("alice", "requests", 10, 8).allowed
    assert limiter.level("alice", "requests", 5).remaining == 2  # reloaded with a lower limit
    assert limiter.level("alice", "requests", 20).limit == 20  # raised: no fresh minute either
    assert limiter.level("alice", "requests", 20).remaining == 2


def test_a_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        Bucket(0, 0.0)
