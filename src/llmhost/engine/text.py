"""Turning sampled tokens into text: UTF-8 safe increments, stop strings never emitted."""

from __future__ import annotations

import codecs
from collections.abc import Callable


class StopMatcher:
    """Holds back text that could be the start of a stop string, so a stop split across tokens
    is still caught and never emitted."""

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        """Add text; return the part that is safe to emit now."""
        if not self._stops:
            return text
        buf = self._held + text
        first: tuple[int, str] | None = None
        for stop in self._stops:
            i = buf.find(stop)
            if i >= 0 and (first is None or i < first[0]):
                first = (i, stop)
        if first is not None:
            self.matched = first[1]
            self._held = ""
            return buf[: first[0]]
        keep = self._longest_partial(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def _longest_partial(self, buf: str) -> int:
        """Length of the longest suffix of buf that is a proper prefix of some stop string."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:n]):
                    best = n
                    break
        return best

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


class IncrementalDetokenizer:
    """Token pieces are bytes; a multi-byte character may span tokens."""

    def __init__(self, piece: Callable[[int], bytes], stops: list[str]) -> None:
        self._piece = piece
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = StopMatcher(stops)

    def add(self, token: int) -> str:
        return self.stop.feed(self._decoder.decode(self._piece(token)))

    def finish(self) -> str:
        tail = self._decoder.decode(b"", final=True)
        if self.stop.matched is not None:
            return ""
        text = self.stop.feed(tail) if tail else ""
        if self.stop.matched is not None:
            return text
        return text + self.stop.flush()
