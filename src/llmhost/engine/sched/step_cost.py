"""What one more token in a decode step costs, from the steps the engine has run.

A llama.cpp step costs a fixed part (reading the weights, the graph) and a part per token. Guesses of
n-gram speculation are worth verifying only while the tokens they are expected to add pay for that
per-token part: nearly always beside one sequence, rarely beside eight. Measured on 2 CPU cores with
Gemma 3 270M Q4_K_M (1,000-token contexts): a step of 1 token 24.5 ms, 2: 30.6, 4: 40.9, 8: 69.4,
16: 114 ms. Guesses verified beside seven other sequences therefore cost about 90% of their share of
a step, while beside none they cost a quarter; a fixed draft length lost at concurrency 8 (0.73x on
prompts that are quoted back) what it won alone (2.5x).

The fit is least squares of step seconds against step tokens over decode steps only (a prefill chunk
of hundreds of tokens costs less per token and would flatten the slope), with older steps forgotten
geometrically; it is held while recent steps are all the same width (no slope to see).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# weight of a step after each later one: about the last 100 steps count
DECAY = 0.99
# a step's fixed cost in tokens of its cost a token, until the engine has fitted its own: Gemma 3 270M
# on 2 cores (above), 18.1 ms fixed and 6.4 ms a token
PRIOR_FIXED_TOKENS = 2.8
# steps observed before the fit is trusted
MIN_STEPS = 16
# the widths of recent steps must spread at least this much (variance, tokens^2) to refit
MIN_SPREAD = 0.25


@dataclass(slots=True, frozen=True)
class Fit:
    fixed_s: float
    per_token_s: float


class StepCost:
    def __init__(self) -> None:
        self._w = self._x = self._y = self._xx = self._xy = 0.0
        self.steps = 0
        self.fit: Fit | None = None

    def observe(self, n_tokens: int, seconds: float) -> None:
        """A decode step of `n_tokens` (every sequence's last token and its guesses) took `seconds`."""
        d, x = DECAY, float(n_tokens)
        self._w = d * self._w + 1.0
        self._x = d * self._x + x
        self._y = d * self._y + seconds
        self._xx = d * self._xx + x * x
        self._xy = d * self._xy + x * seconds
        self.steps += 1
        if self.steps >= MIN_STEPS:
            self._refit()

    def _refit(self) -> None:
        mean_x, mean_y = self._x / self._w, self._y / self._w
        spread = self._xx / self._w - mean_x * mean_x
        if spread < MIN_SPREAD:
            return
        slope = max(0.0, (self._xy / self._w - mean_x * mean_y) / spread)
        self.fit = Fit(max(0.0, mean_y - slope * mean_x), slope)

    def fixed_tokens(self) -> float:
        """A step's fixed cost counted in tokens: how many more tokens a step may carry for the price of
        one more step (infinite when tokens were measured free)."""
        fit = self.fit
        if fit is None:
            return PRIOR_FIXED_TOKENS
        return fit.fixed_s / fit.per_token_s if fit.per_token_s > 0 else math.inf

    def pays(self, acceptance: float, n_tokens: int, n_produced: float) -> bool:
        """Whether a guess accepted with probability `acceptance` raises the tokens per second of a step
        that already decodes `n_tokens` to produce `n_produced`: it adds `acceptance` tokens for one
        token's cost. True while the costs are not known yet (the guesses are how they become known)."""
        fit = self.fit
        if fit is None:
            return True
        step_s = fit.fixed_s + fit.per_token_s * n_tokens
        return acceptance * step_s > fit.per_token_s * n_produced
