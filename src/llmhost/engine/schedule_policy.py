"""The order in which waiting requests get a free sequence slot (`--schedule-policy`)."""

from __future__ import annotations

from llmhost.engine.sequence import Sequence


def admission_rank(policy: str, seq: Sequence, at_hand: int) -> float:
    """Where `policy` puts the waiting `seq` (lowest goes first) given the prompt tokens it would not
    compute if admitted now: "fewest-left" ranks by tokens left to compute, "arrival" by arrival time,
    "cached-first" by tokens at hand, most first."""
    if policy == "arrival":
        return seq.arrival_s
    if policy == "cached-first":
        return -at_hand
    return len(seq.prompt) - at_hand
