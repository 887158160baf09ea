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
