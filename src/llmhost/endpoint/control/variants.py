"""A component's production and shadow variants at run time (SageMaker's production variants): which
variant a request goes to (by weight, or the one X-Amzn-SageMaker-Target-Variant pins), which shadow
variants get a copy of it, the weights changed at run time, and what the shadows did."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from llmhost.endpoint.bodies import ShadowState, VariantState
from llmhost.endpoint.spec import MAX_WEIGHT
from llmhost.errors import BadRequestError

TARGET_HEADER = "X-Amzn-SageMaker-Target-Variant"
INVOKED_HEADER = "X-Amzn-Invoked-Production-Variant"


class VariantError(BadRequestError, ValueError):
    """A variant a request or the admin API names that is not there, or weights refused; `field` names
    what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class ShadowStats:
    """What one shadow variant did with the copies it was sent."""

    sent: int = 0  # copies sent to one of its copies
    in_flight: int = 0  # of them, not yet answered and compared
    answered: int = 0  # of them, answered 2xx
    failed: int = 0  # answered otherwise, or failed on the way
    dropped: int = 0  # not sent: its copies were busy (or none ready), so that it never queues
    latency_s: float = 0.0  # summed over the answered ones: sent until its last byte
    compared: int = 0  # answered, at temperature 0, beside a 2xx primary answer whose text was read
    matched: int = 0  # of them, with exactly the primary's output text


class Copies(Protocol):
    """A variant's component (`component.Component`), as its state reads it."""

    name: str
    timed: int  # answers timed, and their seconds together
    latency_s: float

    def capacity(self) -> Sequence[object]: ...

    def ready(self) -> Sequence[object]: ...


C = TypeVar("C", bound=Copies)


@dataclass
class Variant(Generic[C]):
    name: str
    component: C  # its copies: a component of its own, named COMPONENT:VARIANT
    weight: float  # a production variant's share is weight / the production weights together
    shadow: float | None  # a shadow variant's percent of the requests copied to it; None: production
    routed: int = 0  # requests sent to it (by weight or pinned): production variants
    stats: ShadowStats = field(default_factory=ShadowStats)


def weighted_choice(weights: Sequence[float], rng: random.Random) -> int:
    """An index drawn with probability weight / sum(weights); a weight of 0 is never drawn."""
    total = math.fsum(weights)
    if not total > 0:
        raise ValueError("no weight is above 0")
    x = rng.random() * total
    last = 0
    for i, w in enumerate(weights):
        if w <= 0:
            continue
        last = i
        x -= w
        if x < 0:
            return i
    return last  # x landed on the total through rounding: the last weighted one


class VariantSet(Generic[C]):
    """`rng`: the draws (a seeded one in tests)."""

    def __init__(self, component: str, variants: list[Variant[C]], rng: random.Random | None = None) -> None:
        self.component = component
        self.variants = variants
        self.rng = rng or random.Random()

    @property
    def production(self) -> list[Variant[C]]:
        return [v for v in self.variants if v.shadow is None]

    @property
    def shadows(self) -> list[Variant[C]]:
        return [v for v in self.variants if v.shadow is not None]

    def known(self) -> str:
        return ", ".join(v.name for v in self.production)

    def choose(self, target: str | None) -> Variant[C]:
        """The production variant `target` names, else one drawn by weight."""
        production = self.production
        if target:
            for v in production:
                if v.name == target:
                    return v
            shadow = " (a shadow variant: it takes copies of requests only)" if self._named(target) else ""
            raise VariantError(
                TARGET_HEADER,
                f"{TARGET_HEADER}: component {self.component!r} has no production variant {target!r}"
                f"{shadow}; its production variants: {self.known()}",
            )
        return production[weighted_choice([v.weight for v in production], self.rng)]

    def copied_to(self) -> list[Variant[C]]:
        """The shadow variants this request is copied to: each with its `shadow` percent's chance."""
        return [v for v in self.shadows if v.shadow and self.rng.random() * 100 < v.shadow]

    def _named(self, name: str) -> Variant[C] | None:
        return next((v for v in self.variants if v.name == name), None)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """New weights (a shadow variant's: its percent), all checked before any is set."""
        if not weights:
            raise VariantError("weights", "weights: give at least one VARIANT=WEIGHT")
        for name, w in weights.items():
            v = self._named(name)
            if v is None:
                known = ", ".join(x.name for x in self.variants)
                raise VariantError(
                    "weights",
                    f"weights: component {self.component!r} has no variant {name!r}; its variants: {known}",
                )
            top = 100 if v.shadow is not None else MAX_WEIGHT
            if not math.isfinite(w) or not 0 <= w <= top:
                what = " (a shadow variant's percent)" if v.shadow is not None else ""
                bound = f"between 0 and {top:g}{what}"
                raise VariantError("weights", f"weights.{name}: must be {bound}, got {w}")
        after = [weights.get(v.name, v.weight) for v in self.production]
        if not any(w > 0 for w in after):
            raise VariantError(
                "weights", "weights: the production variants' weights would all be 0; one must be > 0"
            )
        for v in self.variants:
            if v.name in weights:
                if v.shadow is None:
                    v.weight = float(weights[v.name])
                else:
                    v.shadow = float(weights[v.name])

    def status(self) -> list[VariantState]:
        total = math.fsum(v.weight for v in self.production)
        return [self._state(v, total) for v in self.variants]

    @staticmethod
    def _state(v: Variant[C], total: float) -> VariantState:
        c = v.component
        s = v.stats
        shadow: ShadowState | None = None
        if v.shadow is not None:
            shadow = {
                "percent": v.shadow,
                "sent": s.sent,
                "in_flight": s.in_flight,
                "answered": s.answered,
                "failed": s.failed,
                "dropped": s.dropped,
                "mean_latency_s": round(s.latency_s / s.answered, 4) if s.answered else None,
                "compared": s.compared,
                "matched": s.matched,
                "agreement": round(s.matched / s.compared, 4) if s.compared else None,
            }
        return {
            "name": v.name,
            "component": c.name,
            "weight": v.weight if v.shadow is None else None,
            "share": round(v.weight / total, 4) if v.shadow is None and total > 0 else None,
            "routed": v.routed,
            "copies": len(c.capacity()),
            "ready": len(c.ready()),
            "mean_latency_s": round(c.latency_s / c.timed, 4) if c.timed else None,
            "shadow": shadow,
        }
