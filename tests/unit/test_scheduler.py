"""The scheduler on its own: plain data in, plain data out (no model)."""

import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.prefix_cache import KvCopy, KvKeep, KvMove, KvOp, KvTrim
from llmhost.engine.sample.speculative import NgramIndex
from llmhost.engine.sched.scheduler import Scheduler
from llmhost.engine.sched.sequence import SeqStatus, Sequence


def seq(rid: str, prompt: list[int], max_tokens: int = 4) -> Sequence:
    return Sequence(request_id=rid, prompt=prompt, max_tokens=max_tokens, arrival_s=0.0)


def config(**kw: int) -> EngineConfig:
    base = {"max_concurrent": 2, "max_batch_tokens": 8, "max_input_tokens": 64, "max_total_tokens": 128}
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


def run_step(s: Scheduler, token: int = 99) -> None:
    plan = s.schedule(0.0)
    sampled = {i.seq.request_id: [token] for i in plan.items if i.sample}
    s.postprocess(plan, sampled, 0.0)


def test_prompt_is_prefilled_in_budgeted_chunks() -> None:
    s = Scheduler(config(max_batch_tokens=4))
    a = seq("a", list(range(10)))
    s.add(a)
    plan = s.schedule(0.0)
    assert [(i.tokens, i.start_pos, i.sample) for i in plan.items] == [([0, 1, 2, 3], 0, False)]
    s.postprocess(plan, {}, 0.0)
    plan = s.schedule(0.0)
    assert [(i.tokens, i.start_pos) for i in plan.items] == [([4, 5, 6, 7], 4)]
    s.postprocess(plan, {}, 0.0)
    plan = s.schedule(0.0)
    assert plan.items[0].tokens == [8, 9] and plan.items[0].sample
    s.postprocess(plan, {"a": [42]}, 0.0)
    assert a.status is SeqStatus.DECODE and a.output == [42]


def test_one_step_carries_decodes_and_a_prefill_chunk() -> None:
    s = Scheduler(config(max_batch_tokens=6))
    a = seq("a", [1, 2])
    s.add(a)
    run_step(s)  # a prefilled, first token sampled
    b = seq("b", [10, 11, 12, 13, 14, 15, 16, 17])
    s.add(b)
    plan = s.schedule(0.0)
    kinds = [(i.seq.request_id, len(i.tokens)) for i in plan.items]
    assert kinds == [("a", 1), ("b", 5)]  # a decodes one token; b gets the rest of the budget
    assert plan.num_tokens == 6


def test_admission_stops_at_max_concurrent() -> None:
    s = Scheduler(config(max_concurrent=2))
    for rid in "abc":
        s.add(seq(rid, [ord(rid)] * 3))
    plan = s.schedule(0.0)
    assert {i.seq.request_id for i in plan.items} == {"a", "b"}
    assert [q.request_id for q in s.waiting] == ["c"]


def test_finished_sequence_frees_its_slot_for_the_waiting_one() -> None:
    s = Scheduler(config(max_concurrent=1))
    a, b = seq("a", [1, 2]), seq("b", [3, 4])
    s.add(a)
    s.add(b)
    run_step(s)
    s.finish(a)
    plan = s.schedule(0.0)
    assert [i.seq.request_id for i in plan.items] == ["b"]


def test_waiting_prompt_holds_back_for_a_prefix_being_computed_then_copies_it() -> None:
    cfg = config(max_batch_tokens=40, prefix_wait_min_tokens=8)
    s = Scheduler(cfg)
    shared = list(range(100, 160))  # 60 tokens
    a, b = seq("a", [*shared, 1]), seq("b", [*shared, 2])
    s.add(a)
    s.add(b)
    plan = s.schedule(0.0)
    assert [i.seq.request_id for i in plan.items] == ["a"]  # b waits: a is computing their prefix
    s.postprocess(plan, {}, 0.0)
    plan = s.schedule(0.0)  # a computed 40 of 60 shared tokens: still worth waiting
    s.postprocess(plan, {"a": [7]}, 0.0)
    plan = s.schedule(0.0)
    assert b in plan.admitted
    copies = [op for op in plan.kv_ops if isinstance(op, KvCopy)]
    assert copies == [KvCopy(a.kv_seq, b.kv_seq, 60)]
    b_item = next(i for i in plan.items if i.seq is b)
    assert b_item.tokens == [2] and b_item.start_pos == 60
    assert b.n_reused == 60


def test_finish_of_waiting_sequence_removes_it() -> None:
    s = Scheduler(config(max_concurrent=1))
    a, b = seq("a", [1]), seq("b", [2])
    s.add(a)
    s.add(b)
    s.schedule(0.0)
    s.finish(b)
    assert not s.waiting and b.status is SeqStatus.FINISHED


def test_batch_budget_must_cover_one_token_per_running_sequence() -> None:
    with pytest.raises(ValueError, match="max_batch_tokens"):
        Scheduler(config(max_concurrent=16, max_batch_tokens=8))


def test_released_kv_is_trimmed_before_the_next_decode() -> None:
    s = Scheduler(config(max_concurrent=1))
    a = seq("a", [1, 2, 3])
    s.add(a)
    run_step(s)
    s.finish(a, reusable=False)
    plan = s.schedule(0.0)
    assert plan.kv_ops and plan.kv_ops[0].seq == a.kv_seq  # type: ignore[union-attr]


def speculating(rid: str, prompt: list[int], max_tokens: int = 20) -> Sequence:
    q = seq(rid, prompt, max_tokens)
    q.ngrams = NgramIndex(3)
    q.ngrams.extend(prompt)
    return q


def test_decode_step_carries_ngram_drafts_and_keeps_only_what_the_model_confirmed() -> None:
    s = Scheduler(config(max_batch_tokens=16, draft_tokens=3))
    a = speculating("a", [5, 6, 7, 8, 9, 5, 6])
    s.add(a)
    plan = s.schedule(0.0)
    s.postprocess(plan, {"a": [7]}, 0.0)  # prompt done; the model said 7: "5 6 7" was seen before
    plan = s.schedule(0.0)
    [item] = plan.items
    assert item.tokens == [7, 8, 9, 5] and item.draft == (8, 9, 5) and item.start_pos == 7
    s.postprocess(plan, {"a": [8, 9, 4]}, 0.0)  # 2 of 3 guesses confirmed, then the model's own 4
    assert a.output == [7, 8, 9, 4]
    assert a.n_computed == 7 + 1 + 2  # the rejected guess's position is not context
    assert (a.draft_n, a.draft_accepted) == (3, 2)
    assert s.schedule(0.0).kv_ops[0] == KvTrim(a.kv_seq, 10)


def test_drafts_never_overrun_max_tokens() -> None:
    s = Scheduler(config(max_batch_tokens=16, draft_tokens=8))
    a = speculating("a", [1, 2, 3, 4, 1, 2, 3], max_tokens=3)
    s.add(a)
    plan = s.schedule(0.0)
    s.postprocess(plan, {"a": [4]}, 0.0)
    item = s.schedule(0.0).items[0]
    assert len(item.draft) == 1  # 3 tokens allowed: 1 generated, 1 guess, 1 the model adds


def test_choices_of_one_request_share_even_a_short_prompt() -> None:
    s = Scheduler(config(max_concurrent=3, max_batch_tokens=16))
    prompt = [1, 2, 3, 4, 5]  # far below prefix_wait_min_tokens
    choices = [seq(f"c{i}", prompt) for i in range(3)]
    for c in choices:
        c.group = "req"
        s.add(c)
    plan = s.schedule(0.0)
    assert [i.seq.request_id for i in plan.items] == ["c0"], "siblings must wait for the first prefill"
    s.postprocess(plan, {"c0": [9]}, 0.0)
    plan = s.schedule(0.0)
    copies = [op for op in plan.kv_ops if isinstance(op, KvCopy)]
    assert len(copies) == 2 and all(op.n_tokens == 4 for op in copies)
    prefill = [i for i in plan.items if i.seq.request_id != "c0"]
    assert all(i.tokens == [5] for i in prefill), "each choice decodes only the last prompt token"


def test_unrelated_short_prompts_do_not_wait() -> None:
    s = Scheduler(config(max_concurrent=2, max_batch_tokens=16))
    s.add(seq("a", [1, 2, 3]))
    s.add(seq("b", [1, 2, 3]))
    assert len(s.schedule(0.0).items) == 2


def test_max_tokens_zero_prefills_without_sampling_then_is_done() -> None:
    s = Scheduler(config(max_batch_tokens=4))
    a = seq("a", list(range(6)), max_tokens=0)
    s.add(a)
    plan = s.schedule(0.0)
    s.postprocess(plan, {}, 1.0)
    assert not a.prefilled_only
    plan = s.schedule(0.0)
    assert [(i.tokens, i.sample) for i in plan.items] == [([4, 5], False)]  # the last chunk samples nothing
    s.postprocess(plan, {}, 2.0)
    assert a.prefilled_only and a.output == [] and a.first_token_s == 2.0


def test_prompt_logprobs_sequences_do_not_wait_for_a_prefix_they_cannot_reuse() -> None:
    s = Scheduler(config(max_batch_tokens=4))
    a, b = seq("a", list(range(10))), seq("b", list(range(10)))
    a.group = b.group = "r"
    b.prompt_logprobs = True
    s.add(a)
    s.add(b)
    plan = s.schedule(0.0)
    assert [i.seq.request_id for i in plan.items] == ["a"] and b in s.running


def test_prompts_with_logprobs_share_the_steps_prompt_rows_and_others_do_not_count() -> None:
    # a prompt with logprobs keeps every position's logits: a step computes `prompt_rows` of them, all
    # such prompts together; a prompt without takes its share of the budget as before
    s = Scheduler(config(max_concurrent=3, max_batch_tokens=32), prompt_rows=5)
    a, b, c = seq("a", list(range(20))), seq("b", list(range(100, 120))), seq("c", list(range(200, 206)))
    a.prompt_logprobs = b.prompt_logprobs = True
    for x in (a, b, c):
        s.add(x)
    steps: list[dict[str, int]] = []  # each step's prompt chunks of a and b
    while a.status is not SeqStatus.DECODE or b.status is not SeqStatus.DECODE:
        plan = s.schedule(0.0)
        steps.append(
            {i.seq.request_id: len(i.tokens) for i in plan.items if i.seq is not c and i.start_pos < 20}
        )
        assert sum(steps[-1].values()) <= 5
        s.postprocess(plan, {i.seq.request_id: [7] for i in plan.items if i.sample}, 0.0)
    assert steps[0] == {"a": 5} and c.status is SeqStatus.DECODE  # c's whole prompt in the first step
    assert sum(n for step in steps for n in step.values()) == 40 and len(steps) == 8


def test_a_short_prefill_is_not_held_behind_a_long_cold_one_which_still_advances() -> None:
    s = Scheduler(config(max_concurrent=3, max_batch_tokens=16, max_input_tokens=200, max_total_tokens=256))
    cold = seq("cold", list(range(100, 200)))
    s.add(cold)
    run_step(s)  # the cold prompt takes the whole budget while it is alone
    assert cold.n_computed == 16
    warm = seq("warm", list(range(300, 306)))  # a turn with few tokens left to compute
    s.add(warm)
    plan = s.schedule(0.0)
    # shortest remaining first; the oldest prefill keeps a quarter of the budget and the rest
    assert [(i.seq.request_id, len(i.tokens)) for i in plan.items] == [("warm", 6), ("cold", 10)]
    assert plan.items[0].sample, "the short turn finishes its prompt in this step"
    s.postprocess(plan, {"warm": [7]}, 0.0)
    # a stream of short prompts never starves the oldest prefill
    for k in range(3):
        s.add(seq(f"short{k}", list(range(400 + 20 * k, 416 + 20 * k))))
        before = cold.n_computed
        plan = s.schedule(0.0)
        s.postprocess(plan, {i.seq.request_id: [7] for i in plan.items if i.sample}, 0.0)
        assert cold.n_computed - before >= (16 - 1) // 4, "the decode takes one token, the cold one a quarter"
        s.finish(next(q for q in s.running if q.request_id == f"short{k}"))


def test_no_prompt_gets_a_piece_shorter_than_the_oldest_share_unless_it_finishes_the_prompt() -> None:
    # llama.cpp computes each chunk length of a step as a micro-batch of its own: a short piece of a
    # prompt costs one for tokens its next step computes anyway
    s = Scheduler(config(max_concurrent=3, max_batch_tokens=16, max_input_tokens=200, max_total_tokens=256))
    for rid in "abc":
        s.add(seq(rid, list(range(100, 114))))
    plan = s.schedule(0.0)
    assert [(i.seq.request_id, len(i.tokens)) for i in plan.items] == [("a", 14)], "b's 2 tokens wait"
    s.postprocess(plan, {"a": [7]}, 0.0)
    s.finish(s.running[0])
    s.add(seq("d", [1, 2]))  # 2 tokens left: a piece that finishes its prompt is never held back
    plan = s.schedule(0.0)
    assert [(i.seq.request_id, len(i.tokens)) for i in plan.items] == [("d", 2), ("b", 14)]


def test_a_turn_whose_prefix_is_cached_is_admitted_before_earlier_cold_prompts_within_a_bound() -> None:
    s = Scheduler(config(max_concurrent=1, max_batch_tokens=64, prefix_cache_seqs=2))
    turn1 = list(range(100, 140))
    a = seq("a", turn1, max_tokens=1)
    s.add(a)
    run_step(s)
    s.finish(a)  # turn 1's KV stays idle in the context
    cold = [seq(f"cold{k}", list(range(200 + 50 * k, 240 + 50 * k))) for k in range(2)]
    for c in cold:
        s.add(c)
    s.add(warm := seq("turn2", [*turn1, 99, 7, 7]))
    plan = s.schedule(0.0)
    assert plan.admitted == [warm], "3 prompt tokens to compute against 40"
    assert warm.n_reused == 40 and [c.passed_over for c in cold] == [1, 1]
    s.finish(warm)
    s.add(seq("turn2b", [*turn1, 98, 8]))
    for _ in range(2):  # the cold ones go first once passed over max_concurrent (1) time
        plan = s.schedule(0.0)
        s.finish(plan.admitted[0])
    assert [q.request_id for q in s.waiting] == ["turn2b"]


@pytest.mark.parametrize(
    ("policy", "first"),
    [("fewest-left", "short"), ("arrival", "long"), ("cached-first", "turn2")],
)
def test_the_schedule_policy_picks_who_gets_a_free_slot(policy: str, first: str) -> None:
    cfg = EngineConfig(
        max_concurrent=1,
        max_batch_tokens=64,
        max_input_tokens=64,
        max_total_tokens=128,
        prefix_cache_seqs=2,
        schedule_policy=policy,
    )
    s = Scheduler(cfg)
    turn1 = list(range(100, 140))
    a = seq("a", turn1, max_tokens=1)
    s.add(a)
    run_step(s)
    s.finish(a)  # turn 1's KV stays idle in the context
    s.add(seq("long", list(range(200, 240))))  # 40 tokens to compute, arrived first
    s.add(seq("short", [300, 301]))  # 2 tokens to compute
    s.add(seq("turn2", [*turn1, 99, 7, 7]))  # 43 tokens, 40 of them cached: 3 to compute
    assert [q.request_id for q in s.schedule(0.0).admitted] == [first]


def test_an_unknown_schedule_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="schedule_policy must be one of fewest-left, arrival, cached-first"):
        EngineConfig(schedule_policy="lifo")


def test_finished_conversations_stay_in_their_slots_each_turn_taking_its_own() -> None:
    s = Scheduler(config(max_concurrent=2, max_batch_tokens=64))
    ops: list[KvOp] = []

    def turn(request_id: str, prompt: list[int]) -> Sequence:
        x = seq(request_id, prompt, 2)
        s.add(x)
        ops.clear()
        while len(x.output) < 2:
            plan = s.schedule(0.0)
            ops.extend(plan.kv_ops)
            s.postprocess(plan, {i.seq.request_id: [7] for i in plan.items if i.sample}, 0.0)
        s.finish(x)
        return x

    a1 = turn("a1", list(range(20)))
    assert a1.kv_seq == 0 and s.cache.held_seqs == 1 and s.schedule(0.0).kv_ops == [], "no copy"
    a2 = turn("a2", [*a1.computed_tokens, 7, 5, 6])
    assert (a2.n_reused, a2.kv_seq, ops) == (21, 0, [KvKeep(0, 21)]), "its own slot, taken in place"
    b = turn("b", list(range(100, 120)))
    assert b.kv_seq == 1 and ops == [], "the empty slot, not the one holding a's conversation"
    c = turn("c", list(range(200, 220)))
    assert c.kv_seq == 0 and ops == [KvTrim(0, 0)], "no slot empty: the least recently used one's KV leaves"
    assert s.cache.held_seqs == 2


def three_running() -> tuple[Scheduler, list[Sequence]]:
    s = Scheduler(config(max_concurrent=3, max_batch_tokens=16))
    seqs = [seq(rid, [ord(rid)] * 3, max_tokens=8) for rid in "abc"]
    for q in seqs:
        s.add(q)
    run_step(s)
    assert [q.kv_seq for q in seqs] == [0, 1, 2]
    return s, seqs


def test_a_running_sequence_moves_into_a_free_id_so_the_batch_stays_consecutive() -> None:
    s, (a, b, c) = three_running()
    s.finish(a, reusable=False)
    assert not s.schedule(0.0).moved, "1 and 2 still run consecutively"
    s, (a, b, c) = three_running()
    s.finish(b, reusable=False)
    plan = s.schedule(0.0)
    assert KvMove(2, 1, c.n_computed) in plan.kv_ops
    assert plan.moved == [(c, 2)] and c.kv_seq == 1
    assert sorted(i.seq.kv_seq for i in plan.items) == [0, 1]


def test_a_waiting_sequence_fills_the_free_id_instead() -> None:
    s, (_, b, c) = three_running()
    s.finish(b, reusable=False)
    d = seq("d", [9, 9])
    s.add(d)
    plan = s.schedule(0.0)
    assert d.kv_seq == 1 and not plan.moved and c.kv_seq == 2


def test_a_sequence_with_kv_operations_pending_is_not_moved_that_step() -> None:
    s, (_, b, c) = three_running()
    s.finish(b, reusable=False)
    s.restore_ops([KvTrim(c.kv_seq, c.n_computed)])  # e.g. its rejected guesses
    plan = s.schedule(0.0)
    assert not plan.moved and c.kv_seq == 2
    s.postprocess(plan, {i.seq.request_id: [5] for i in plan.items if i.sample}, 0.0)
    assert s.schedule(0.0).moved == [(c, 2)]


def test_a_lower_priority_number_is_admitted_first_whatever_the_policy_ranks() -> None:
    s = Scheduler(config(max_concurrent=1))
    batch = [seq(f"batch{i}", [10, 11]) for i in range(3)]
    for b in batch:
        b.priority = 1
        s.add(b)
    s.add(chat := seq("chat", list(range(20, 50))))  # 30 tokens to compute against 2, arrived last
    assert s.schedule(0.0).admitted == [chat]
    s.finish(chat)
    assert s.schedule(0.0).admitted == [batch[0]]


def test_a_sequence_passed_over_too_often_goes_first_only_among_its_priority() -> None:
    s = Scheduler(config(max_concurrent=1))
    s.add(starved := seq("batch", [10, 11]))
    starved.priority, starved.passed_over = 1, 5
    s.add(chat := seq("chat", list(range(20, 50))))
    assert s.schedule(0.0).admitted == [chat]


def test_batch_work_leaves_the_interactive_slots_free() -> None:
    s = Scheduler(config(max_concurrent=3, max_batch_tokens=64))  # interactive_slots: 1 by default
    batch = [seq(f"batch{i}", [10 + i, 11]) for i in range(4)]
    for b in batch:
        b.priority = 1
        s.add(b)
    assert s.schedule(0.0).admitted == batch[:2], "the third sequence is kept for interactive work"
    assert [b.passed_over for b in batch[2:]] == [0, 0], "held back, not passed over"
    s.add(chat := seq("chat", [30, 31]))
    assert s.schedule(0.0).admitted == [chat]
    every = Scheduler(EngineConfig(max_concurrent=3, max_batch_tokens=64, interactive_slots=0))
    for b in (seq(f"b{i}", [10 + i, 11]) for i in range(4)):
        b.priority = 1
        every.add(b)
    assert len(every.schedule(0.0).admitted) == 3


def first_token_steps(s: Scheduler, seqs: list[Sequence]) -> list[int]:
    """The step in which each of `seqs` gets its first token."""
    steps = {}
    for step in range(1, 100):
        plan = s.schedule(0.0)
        s.postprocess(plan, {i.seq.request_id: [7] for i in plan.items if i.sample}, 0.0)
        steps.update(
            {i.seq.request_id: step for i in plan.items if i.sample and i.seq.request_id not in steps}
        )
        if len(steps) == len(seqs):
            break
    return [steps[q.request_id] for q in seqs]


def burst(s: Scheduler, prompt_tokens: int) -> list[int]:
    """Eight prompts of `prompt_tokens` added at once: the step in which each gets its first token."""
    prompts = [seq(f"p{k}", list(range(100 * k, 100 * k + prompt_tokens))) for k in range(8)]
    for q in prompts:
        s.add(q)
    return first_token_steps(s, prompts)


def burst_scheduler() -> Scheduler:
    return Scheduler(
        config(max_concurrent=8, max_batch_tokens=512, max_input_tokens=100, max_total_tokens=256)
    )


def test_prompts_arriving_together_complete_half_a_step_at_a_time() -> None:
    # eight 64-token prompts fit one 512-token step, but there every first token waits for all eight:
    # a step takes prompts up to half its budget, then only those worth delaying its first tokens for
    assert burst(burst_scheduler(), 64) == [1, 1, 1, 1, 2, 2, 2, 2]


def test_past_half_the_budget_a_prompt_joins_a_step_only_where_it_saves_more_than_it_delays() -> None:
    # 40-token prompts: seven fill half the 512-token budget (the seventh starts below it); the eighth
    # would delay seven first tokens by 40 tokens each to spare itself one step's fixed cost
    # (PRIOR_FIXED_TOKENS 2.8): 7 * 40 > 1 * 2.8, it waits
    assert burst(burst_scheduler(), 40) == [1, 1, 1, 1, 1, 1, 1, 2]


def test_the_measured_step_cost_sets_whether_a_prompt_joins() -> None:
    # a fixed cost of 300 tokens (3 s fixed, 10 ms a token): the eighth 40-token prompt joins
    s = burst_scheduler()
    for i in range(40):
        s.step_cost.observe(1 + i % 8, 3.0 + 0.01 * (1 + i % 8))
    assert s.step_cost.fixed_tokens() == pytest.approx(300.0)
    assert burst(s, 40) == [1] * 8
