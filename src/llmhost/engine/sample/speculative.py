"""Prompt n-gram lookup: draft tokens for speculative decoding without a draft model.

Where the text repeats itself (summaries quoting their input, code edits, extraction), the tokens that
followed the last occurrence of the current n-gram are a good guess of what comes next. The target model
verifies the guess in one decode; greedy output stays exactly what it would have been.
"""

from __future__ import annotations


class NgramIndex:
    """Last position at which each n-gram (sizes `min_n`..`max_n`) of a token list ended."""

    def __init__(self, max_n: int = 3, min_n: int = 2) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.sizes = range(max_n, min_n - 1, -1)
        self.tokens: list[int] = []
        # n-gram -> index just past its latest occurrence that has a successor
        self._next: dict[tuple[int, ...], int] = {}

    def extend(self, tokens: list[int]) -> None:
        for tok in tokens:
            # the n-grams ending at the old last token now have a successor: `tok`
            end = len(self.tokens)
            for n in self.sizes:
                if end >= n:
                    self._next[tuple(self.tokens[end - n : end])] = end
            self.tokens.append(tok)

    def propose(self, k: int) -> list[int]:
        """Up to `k` tokens that followed the latest earlier occurrence of the longest matching suffix."""
        if k <= 0:
            return []
        end = len(self.tokens)
        for n in self.sizes:
            if end < n:
                continue
            start = self._next.get(tuple(self.tokens[end - n :]))
            if start is not None:
                return self.tokens[start : start + k]
        return []


# drafts that accepted nothing, in a row, before a sequence stops drafting for a while
MISSES_TO_REST = 3
# decode steps without drafts after such a run of misses: doubled after each failed probe, up to the max
REST_STEPS = 8
MAX_REST_STEPS = 256
# weight of the latest draft in a sequence's acceptance rate
ACCEPTANCE_WEIGHT = 0.3


def blend(last: float | None, value: float, weight: float) -> float:
    """An exponentially weighted average: `value` weighs `weight`, what came before the rest."""
    return value if last is None else (1 - weight) * last + weight * value


class DraftLength:
    """How many n-gram guesses one sequence verifies next, adapted from how its last ones fared.

    A failed guess costs a wider decode and buys nothing, so the length halves on a draft that
    accepted nothing and drops to 0 (no drafting) after `MISSES_TO_REST` such drafts in a row; a
    rest of `REST_STEPS` decode steps later, one short probe tries again (rests double while probes
    keep failing). A fully accepted draft doubles the length, up to `max_len`; a partly accepted one
    sets it to what was accepted plus one. Verification is unchanged: greedy output is the same.
    """

    def __init__(self, max_len: int) -> None:
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.max_len = max_len
        self.length = max_len
        self.misses = 0
        self.rest = 0  # decode steps left without drafting
        self._next_rest = REST_STEPS
        # share of recent guesses confirmed (recent drafts weigh more); None before the first draft
        self.acceptance: float | None = None
        # resting because the step cost refused its guesses: a one-token probe follows the rest
        self._held = False
        self._next_hold = REST_STEPS

    def next_limit(self, pays: bool) -> int:
        """Guesses to verify in the next step, where `pays` says whether guesses at this sequence's
        acceptance rate pay for their place in a step that wide: none while resting; a one-token probe
        after a rest the step cost imposed (its outcome keeps the rate current); else `limit` if they
        pay, and a rest if not (rests double while they keep not paying, up to the max)."""
        if self.rest:
            return 0
        if self._held:
            self._held = False
            return 1
        if pays:
            self._next_hold = REST_STEPS
            return self.limit
        self.rest, self._held = self._next_hold, True
        self._next_hold = min(MAX_REST_STEPS, 2 * self._next_hold)
        return 0

    @property
    def limit(self) -> int:
        """Guesses this sequence may verify in its next step (0: resting)."""
        return 0 if self.rest else self.length

    def record(self, drafted: int, accepted: int) -> None:
        """One decode step of the sequence: `drafted` guesses verified, `accepted` of them confirmed."""
        if drafted == 0:
            self.rest = max(0, self.rest - 1)
            return
        self.acceptance = blend(self.acceptance, min(accepted, drafted) / drafted, ACCEPTANCE_WEIGHT)
        if accepted:
            self.misses = 0
            self._next_rest = REST_STEPS
            full = accepted >= drafted
            self.length = min(self.max_len, self.length * 2 if full else accepted + 1)
            return
        self.misses += 1
        self.length = max(1, self.length // 2)
        if self.misses >= MISSES_TO_REST:
            self.misses = 0
            self.length = 1  # the probe after the rest
            self.rest = self._next_rest
            self._next_rest = min(MAX_REST_STEPS, self._next_rest * 2)
