"""Who goes first: the order in which waiting requests get a free sequence slot (`--schedule-policy`),
and how a step's prefill budget is shared among the prompts being computed."""

from __future__ import annotations

from llmhost.engine.sched.sequence import Sequence


def admission_rank(policy: str, seq: Sequence, at_hand: int) -> float:
    """Where `policy` puts the waiting `seq` (lowest goes first) given the prompt tokens it would not
    compute if admitted now: "fewest-left" ranks by tokens left to compute, "arrival" by arrival time,
    "cached-first" by tokens at hand, most first."""
    if policy == "arrival":
        return seq.arrival_s
    if policy == "cached-first":
        return -at_hand
    return len(seq.prompt) - at_hand


# share of a step's prefill budget the longest-waiting prefill always gets, however many shorter
# prompts arrive after it: shortest-first ordering never starves it
OLDEST_PREFILL_SHARE = 4
# a chunk that leaves part of its prompt for later steps is at least 1/this of the prefill budget (the
# oldest prefill's share): see `prefill_shares`
MIN_PARTIAL_CHUNK = OLDEST_PREFILL_SHARE


def prefill_shares(prefilling: list[Sequence], budget: int) -> list[tuple[Sequence, int]]:
    """Prompt tokens each prefilling sequence (in admission order) computes this step, shortest
    remaining prompt first, so a turn whose prefix was at hand (a few new tokens) is not held behind
    another's cold prefill of thousands; the oldest keeps 1/`OLDEST_PREFILL_SHARE` of the budget.

    Even chunks (every prompt the same share) were measured and not taken: llama.cpp runs chunks of
    one length as one micro-batch, so 8 prompts of 200 tokens prefill in 2.35 s against 2.55 s here,
    but every first token then waits for the last chunk: at concurrency 8 on distinct prompts
    (`benchmarks/serve_compare.py`, 3 rounds, 2 cores) output tokens/s rose 1.5% while TTFT p50 went
    from 1.5-1.6 s to 1.7-2.5 s, past llama-server's 2.45 s in one round.

    A chunk that does not finish its prompt is at least the oldest's share (`MIN_PARTIAL_CHUNK`): with
    a KV stream per sequence llama.cpp computes each length of chunk in a step as a micro-batch of its
    own, and a short piece of a prompt (the budget's leftover) bought one more micro-batch for tokens
    the prompt computes in its next step anyway. Counted on serve_compare's concurrency-8 distinct
    work (`benchmarks/micro_batches.py`: 24 prompts of 200 tokens, 64 new, 512-token steps): 216
    micro-batches, 209 without such pieces (the bound's schedule: 201); its first step computes 2
    whole prompts (1 micro-batch) instead of 2 and a 112-token piece (2). On the default model (1
    thread, CPU time, 16 requests x 32 new, 2 runs each): 81 -> 74 micro-batches, output tokens/s
    within noise (-0.4%, +3.8%), TTFT p50 1.51-1.55 -> 1.23-1.26 s, p90 4.5-4.9 -> 3.5-3.8 s."""
    if budget <= 0 or not prefilling:
        return []
    left = {id(s): len(s.prompt) - s.n_computed for s in prefilling}
    oldest = prefilling[0]
    least = budget // MIN_PARTIAL_CHUNK
    give = {id(oldest): min(left[id(oldest)], budget // OLDEST_PREFILL_SHARE)}
    budget -= give[id(oldest)]
    out = []
    for seq in sorted(prefilling, key=lambda s: left[id(s)]):
        given = give.get(id(seq), 0)
        more = min(budget, left[id(seq)] - given)
        if seq is not oldest and more < min(least, left[id(seq)]):
            continue  # a piece of a prompt too short for the micro-batch it costs
        budget -= more
        if given + more > 0:
            out.append((seq, given + more))
    return out
