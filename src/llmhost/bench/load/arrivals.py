"""Open-loop arrivals: gaps between request arrivals at a mean rate, with vLLM's burstiness.

Gaps follow a gamma distribution of shape ``burstiness`` and scale ``1 / (rate × burstiness)``, so
the mean gap is ``1 / rate`` whatever the burstiness and the coefficient of variation is
``1 / sqrt(burstiness)``: 1.0 is a Poisson process (exponential gaps), below 1 arrivals come in
bursts, above 1 they are more evenly spaced. This is ``vllm bench serve --burstiness``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Arrivals:
    rate_rps: float
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        if self.rate_rps <= 0:
            raise ValueError("the request rate must be positive")
        if self.burstiness <= 0:
            raise ValueError("burstiness must be positive (1.0: Poisson arrivals)")

    def gap_s(self, rng: random.Random) -> float:
        """Seconds until the next arrival, drawn from ``rng`` (seeded by the caller)."""
        if self.burstiness == 1.0:
            # the exponential draw itself, so a seed gives the same arrivals as before burstiness existed
            return rng.expovariate(self.rate_rps)
        return rng.gammavariate(self.burstiness, 1.0 / (self.rate_rps * self.burstiness))
