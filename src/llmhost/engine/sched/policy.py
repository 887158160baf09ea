"""Who goes first: the order in which waiting requests get a free sequence slot (`--schedule-policy`),
and how a step's prefill budget is shared among the prompts being computed."""

from __future__ import annotations

from llmhost.engine.sched.sequence import Sequence
from llmhost.engine.sched.step_cost import PRIOR_FIXED_TOKENS


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
# a step's prompt work up to 1/this of its budget is taken whatever it delays (see `prefill_shares`)
ORDERED_FROM_SHARE = 2
# a chunk that leaves part of its prompt for later steps is at least 1/this of the prefill budget (the
# oldest prefill's share): see `prefill_shares`
MIN_PARTIAL_CHUNK = OLDEST_PREFILL_SHARE


def prefill_shares(
    prefilling: list[Sequence], budget: int, fixed_tokens: float = PRIOR_FIXED_TOKENS
) -> list[tuple[Sequence, int]]:
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
    within noise (-0.4%, +3.8%), TTFT p50 1.51-1.55 -> 1.23-1.26 s, p90 4.5-4.9 -> 3.5-3.8 s.

    Many short prompts would all fit one step, and there every first token waits for the last of them.
    Once a step holds half its budget of prompt work (`ORDERED_FROM_SHARE`), a further prompt it would
    complete joins only when that costs the `finishing` prompts of the step no more waiting than it
    saves, one step's fixed cost (`fixed_tokens`, in tokens: `StepCost.fixed_tokens`) for itself and
    for each prompt after it: `finishing * tokens <= (1 + after) * fixed_tokens`; one turned away ends
    the step's prompt work (shortest remaining first: nothing longer joins; the oldest keeps its
    share). Measured with eight 64-token prompts at once, closed loop (2 waves, Llama 3.2 3B shape, 2
    cores): all eight in one step, TTFT p50 12.6-13.0 s, the run 80-82 s; this rule from the first
    prompt (one a step) 4.1-4.2 s but 84-90 s; about three a step 7.7-8.8 s, 81-86 s. From half the
    budget (four a step) against llama-server in `benchmarks/shapes.py`: TTFT p50 at concurrency 8
    0.63-0.70x at the 1B shape and 0.69-0.74x at 3B, output tokens/s 0.995-1.064x and 0.953-0.991x."""
    if budget <= 0 or not prefilling:
        return []
    whole, rule_from = budget, budget // ORDERED_FROM_SHARE
    left = {id(s): len(s.prompt) - s.n_computed for s in prefilling}
    oldest = prefilling[0]
    least = budget // MIN_PARTIAL_CHUNK
    give = {id(oldest): min(left[id(oldest)], budget // OLDEST_PREFILL_SHARE)}
    budget -= give[id(oldest)]
    ordered = sorted(prefilling, key=lambda s: left[id(s)])
    finishing = 0  # prompts this step completes so far
    full = False  # a prompt was turned away: nothing longer joins
    out = []
    for k, seq in enumerate(ordered):
        given = give.get(id(seq), 0)
        more = min(budget, left[id(seq)] - given)
        if seq is not oldest and more < min(least, left[id(seq)]):
            continue  # a piece of a prompt too short for the micro-batch it costs
        finishes = given + more == left[id(seq)]
        if finishes and finishing and whole - budget >= rule_from:  # the step's prompt tokens so far
            full = full or finishing * more > (len(ordered) - k) * fixed_tokens
        if more and full:
            more = 0  # it would delay the first tokens of this step for more than it saves
            finishes = given == left[id(seq)]
        budget -= more
        if given + more > 0:
            out.append((seq, given + more))
            finishing += finishes
    return out
