"""Where one sequence stands in a thinking model's output: before, inside or after its thought.

The sampler asks it which token is forced (the end tag, once the thought's budget is spent, as
llama.cpp's reasoning budget closes a thought) and whether the grammar applies yet (a structured answer
follows the thought; the thought itself is free text), and tells it each token taken.
"""

from __future__ import annotations

import enum

from llmhost.engine.request import Thinking


class Phase(enum.Enum):
    START = "start"  # no token yet matched against the start tag: the output may open a thought
    OPENING = "opening"  # the output so far is the start of the start tag
    THINKING = "thinking"  # inside the thought
    CLOSING = "closing"  # the budget is spent: the end tag's tokens are being forced
    ANSWER = "answer"  # the thought is over (or never began): the answer's tokens


class ThoughtTracker:
    def __init__(self, thinking: Thinking, constrained: bool) -> None:
        self.thinking = thinking
        # a constrained answer may only open a thought with the whole start tag: once its first token is
        # taken, the rest is forced (the grammar never sees a cut tag)
        self._constrained = constrained
        self.phase = Phase.THINKING if thinking.opened else Phase.START
        self._matched = 0  # tokens of the start tag (OPENING) or end tag (THINKING, CLOSING) so far
        self.reasoning_tokens = 0  # thought tokens, tags not counted

    @property
    def answering(self) -> bool:
        return self.phase is Phase.ANSWER

    @property
    def may_open(self) -> int | None:
        """The start tag's first token while the output may still open a thought with it."""
        return self.thinking.start[0] if self.phase is Phase.START else None

    def forced(self) -> int | None:
        """The token the next position must take, if any."""
        t = self.thinking
        if self.phase is Phase.OPENING and self._constrained:
            return t.start[self._matched]
        if self.phase is Phase.THINKING and t.budget is not None and self.reasoning_tokens >= t.budget:
            self.phase = Phase.CLOSING
        if self.phase is Phase.CLOSING:
            return t.end[self._matched]
        return None

    def accept(self, token: int) -> bool:
        """Take the next output token; True when it belongs to the answer."""
        if self.phase in (Phase.START, Phase.OPENING):
            return self._opening(token)
        if self.phase is Phase.ANSWER:
            return True
        end = self.thinking.end
        if token == end[self._matched]:
            self._matched += 1
            if self._matched == len(end):
                self.phase, self._matched = Phase.ANSWER, 0
            return False
        if self.phase is Phase.CLOSING:
            raise RuntimeError(f"token {token} taken where the thought's end tag was forced")
        # a cut end tag was thought after all; this token may begin the tag again
        self.reasoning_tokens += self._matched + 1
        self._matched = 0
        if token == end[0]:
            self.reasoning_tokens -= 1
            self._matched = 1
        return False

    def _opening(self, token: int) -> bool:
        start = self.thinking.start
        if token == start[self._matched]:
            self._matched += 1
            self.phase = Phase.OPENING
            if self._matched == len(start):
                self.phase, self._matched = Phase.THINKING, 0
            return False
        # no thought: this token and any start-tag tokens before it are the answer's
        self.phase, self._matched = Phase.ANSWER, 0
        return True
