"""Token buckets per key name: the pure logic of per-key quotas (web/quota.py answers over HTTP).

A limit of N a minute is a bucket of N that refills at N/60 a second: a key can spend its whole minute
at once, then one more every 60/N seconds; idle, it is full again within a minute. A request takes 1
from the requests bucket, and its tokens from the tokens bucket; tokens taken on an estimate are given
back (or more taken) once the real count is known, so the tokens level may go below zero: the key then
waits until it is paid back. The clock is injected (monotonic seconds), so tests need no sleeping.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

SECONDS_PER_MINUTE = 60.0


@dataclass(frozen=True, slots=True)
class Level:
    """A bucket as a client is told it: its limit, what is left (whole units, never below 0), and the
    seconds until it is full again."""

    limit: int
    remaining: int
    reset_s: float


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether `amount` was taken; if not, `retry_after_s` says when it could be (None: never, more
    than the bucket holds)."""

    allowed: bool
    level: Level
    retry_after_s: float | None = 0.0


class Bucket:
    """`per_minute` units, refilled continuously."""

    def __init__(self, per_minute: int, now: float) -> None:
        if per_minute <= 0:
            raise ValueError(f"a limit per minute must be > 0, got {per_minute}")
        self.per_minute = per_minute
        self._level = float(per_minute)
        self._at = now

    @property
    def rate(self) -> float:
        """Units refilled a second."""
        return self.per_minute / SECONDS_PER_MINUTE

    def resize(self, per_minute: int, now: float) -> None:
        """A new limit (the keys reloaded): what was spent stays spent, the level capped at the limit."""
        self._refill(now)
        self.per_minute = per_minute
        self._level = min(self._level, float(per_minute))

    def take(self, amount: int, now: float) -> Decision:
        self._refill(now)
        if amount > self.per_minute:
            return Decision(False, self.level(now), None)
        if self._level >= amount:
            self._level -= amount
            return Decision(True, self.level(now))
        return Decision(False, self.level(now), (amount - self._level) / self.rate)

    def adjust(self, amount: int, now: float) -> None:
        """Give back `amount` (negative: take more, even below zero), never above the limit."""
        self._refill(now)
        self._level = min(self._level + amount, float(self.per_minute))

    def level(self, now: float) -> Level:
        self._refill(now)
        remaining = max(0, math.floor(self._level))
        return Level(self.per_minute, remaining, (self.per_minute - self._level) / self.rate)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._at)
        self._level = min(float(self.per_minute), self._level + elapsed * self.rate)
        self._at = now


class RateLimiter:
    """One bucket per (key name, what it counts), made on first use and kept across reloads of the keys:
    a key file read again does not give anyone a fresh minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[tuple[str, str], Bucket] = {}

    def take(self, name: str, counted: str, per_minute: int, amount: int) -> Decision:
        return self._bucket(name, counted, per_minute).take(amount, self._clock())

    def adjust(self, name: str, counted: str, per_minute: int, amount: int) -> None:
        self._bucket(name, counted, per_minute).adjust(amount, self._clock())

    def level(self, name: str, counted: str, per_minute: int) -> Level:
        return self._bucket(name, counted, per_minute).level(self._clock())

    def _bucket(self, name: str, counted: str, per_minute: int) -> Bucket:
        now = self._clock()
        bucket = self._buckets.get((name, counted))
        if bucket is None:
            bucket = self._buckets[name, counted] = Bucket(per_minute, now)
        elif bucket.per_minute != per_minute:
            bucket.resize(per_minute, now)
        return bucket
