import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.sample.speculative import MISSES_TO_REST, REST_STEPS, DraftLength, NgramIndex
from llmhost.engine.sched.scheduler import Scheduler, even_drafts
from llmhost.engine.sched.sequence import Sequence
from llmhost.engine.sched.step_cost import StepCost
from llmhost.engine.sched.step_plan import BatchItem


def test_proposes_what_followed_the_latest_occurrence_of_the_suffix() -> None:
    ix = NgramIndex(max_n=3, min_n=2)
    ix.extend([1, 2, 3, 4, 5, 1, 2, 3])
    assert ix.propose(3) == [4, 5, 1]
    ix.extend([4, 9, 2, 3])
    assert ix.propose(2) == [4, 9]  # the latest "2 3" was followed by 4, then 9


def test_nothing_to_propose_without_a_repeat() -> None:
    ix = NgramIndex()
    ix.extend([7, 8, 9])
    assert ix.propose(4) == []
    assert ix.propose(0) == []
    with pytest.raises(ValueError):
        NgramIndex(max_n=1, min_n=2)


# -- the adaptive draft length ----------------------------------------------------------------------
def misses(d: DraftLength, n: int) -> None:
    for _ in range(n):
        d.record(max(1, d.limit), 0)


def test_draft_length_grows_on_success_and_tracks_partial_acceptance() -> None:
    d = DraftLength(12)
    assert d.limit == 12
    d.record(12, 3)  # 3 confirmed, then a miss: next time 4 guesses
    assert d.limit == 4
    d.record(4, 4)
    assert d.limit == 8
    d.record(8, 8)
    assert d.limit == 12, "never beyond max_len"
    d.record(0, 0)  # a step with nothing to propose changes nothing
    assert d.limit == 12


def test_failing_drafts_shrink_to_none_then_a_probe_follows_a_rest() -> None:
    d = DraftLength(12)
    d.record(12, 0)
    assert d.limit == 6
    d.record(6, 0)
    assert d.limit == 3
    d.record(3, 0)
    assert d.limit == 0, f"{MISSES_TO_REST} misses in a row: resting"
    for _ in range(REST_STEPS - 1):
        d.record(0, 0)
        assert d.limit == 0
    d.record(0, 0)
    assert d.limit == 1, "after the rest, a one-token probe"
    d.record(1, 1)
    assert d.limit == 2, "a confirmed probe grows again"


def test_rests_double_while_probes_keep_failing_and_reset_on_success() -> None:
    d = DraftLength(4)
    rests = []
    for _ in range(8):
        misses(d, MISSES_TO_REST)
        rests.append(d.rest)
        while d.limit == 0:
            d.record(0, 0)
    assert rests == [8, 16, 32, 64, 128, 256, 256, 256]
    d.record(1, 1)
    misses(d, MISSES_TO_REST)
    assert d.rest == REST_STEPS, "a success resets the rest"
    long = DraftLength(64)
    misses(long, MISSES_TO_REST)
    while long.limit == 0:
        long.record(0, 0)
    assert long.limit == 1, "the probe is one token whatever the maximum"
    with pytest.raises(ValueError):
        DraftLength(0)


def test_the_scheduler_stops_drafting_for_a_sequence_whose_guesses_fail() -> None:
    s = Scheduler(EngineConfig(max_concurrent=1, max_batch_tokens=32, draft_tokens=4))
    a = Sequence(request_id="a", prompt=[1, 2, 3], max_tokens=200, arrival_s=0.0)
    a.draft_length = DraftLength(4)
    s.add(a)
    plan = s.schedule(0.0)
    s.postprocess(plan, {"a": [40]}, 0.0)
    drafted = []
    for step in range(3 + REST_STEPS + 1):
        # an index whose suffix "1 2" always has a long continuation at hand
        a.ngrams = NgramIndex(3)
        a.ngrams.extend([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2])
        plan = s.schedule(0.0)
        [item] = plan.items
        drafted.append(len(item.draft))
        s.postprocess(plan, {"a": [50 + step]}, 0.0)  # every guess refused: the model's own token
    assert drafted[:3] == [4, 2, 1] and drafted[3 : 3 + REST_STEPS] == [0] * REST_STEPS
    assert drafted[-1] == 1, "a probe after the rest"


def test_the_step_cost_fit_finds_the_fixed_and_per_token_parts_and_holds_without_spread() -> None:
    cost = StepCost()
    assert cost.pays(0.01, 8, 8), "unknown costs: guesses are how they become known"
    for i in range(40):
        n = 1 + i % 8
        cost.observe(n, 0.020 + 0.006 * n)
    assert cost.fit is not None
    assert cost.fit.fixed_s == pytest.approx(0.020) and cost.fit.per_token_s == pytest.approx(0.006)
    for _ in range(1000):  # every later step is 8 tokens wide: no slope to see, the fit holds
        cost.observe(8, 0.020 + 0.006 * 8)
    assert cost.fit.per_token_s == pytest.approx(0.006)


def test_a_guess_pays_alone_at_a_low_acceptance_and_beside_seven_only_at_a_high_one() -> None:
    cost = StepCost()
    for i in range(40):  # as measured on 2 cores: 24.5 ms for 1 token, 69.4 ms for 8
        n = 1 + i % 8
        cost.observe(n, 0.0181 + 0.0064 * n)
    # alone: a step is mostly fixed cost, a guess pays from about a quarter accepted
    assert cost.pays(0.3, 1, 1) and not cost.pays(0.2, 1, 1)
    # beside seven others each token costs nearly its share: about three quarters must be accepted
    assert cost.pays(0.8, 8, 8) and not cost.pays(0.7, 8, 8)


def test_the_scheduler_verifies_guesses_only_where_their_acceptance_pays_for_the_step_width() -> None:
    s = Scheduler(EngineConfig(max_concurrent=8, max_batch_tokens=128, draft_tokens=4))
    for i in range(40):
        s.step_cost.observe(1 + i % 8, 0.0181 + 0.0064 * (1 + i % 8))
    seqs = [Sequence(request_id=f"s{i}", prompt=[1, 2, 3], max_tokens=200, arrival_s=0.0) for i in range(8)]
    for seq in seqs:
        s.add(seq)
    plan = s.schedule(0.0)
    s.postprocess(plan, {seq.request_id: [40] for seq in seqs}, 0.0)

    def drafts(n_running: int, *acceptance: float) -> list[int]:
        for seq, rate in zip(seqs, acceptance * 8, strict=False):
            seq.draft_length = DraftLength(4)
            seq.draft_length.acceptance = rate
            seq.ngrams = NgramIndex(3)
            seq.ngrams.extend([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2])
        s.running = seqs[:n_running]
        return [len(item.draft) for item in s.schedule(0.0).items]

    assert drafts(1, 0.5) == [4], "alone, half the guesses accepted pay"
    assert drafts(8, 0.5) == [0] * 8, "beside seven others they do not"
    # there a guess must be confirmed about three times in four: those at 0.8 would draft, those at 0.7
    # not, and a step keeps one micro-batch: every draft is cut to the shortest (even_drafts)
    assert drafts(8, 0.8, 0.7) == [0] * 8
    assert drafts(8, 0.8) == [4] * 8
    # sequences with no drafts of their own yet are judged by everyone's recent acceptance
    s.draft_acceptance = 0.5
    for seq in seqs:
        seq.draft_length = DraftLength(4)
    s.running = seqs
    assert [len(item.draft) for item in s.schedule(0.0).items] == [0] * 8
    s.draft_acceptance = None
    assert drafts(8, None) == [4] * 8, "nothing known yet: guesses are how it becomes known"  # type: ignore[arg-type]


def test_guesses_the_step_cost_refuses_rest_then_a_one_token_probe_keeps_the_rate_current() -> None:
    length = DraftLength(8)
    assert length.next_limit(pays=True) == 8
    assert length.next_limit(pays=False) == 0 and length.rest == REST_STEPS
    for _ in range(REST_STEPS):
        length.record(0, 0)
    assert length.next_limit(pays=False) == 1, "the probe, whatever the cost says"
    length.record(1, 1)
    assert length.acceptance == 1.0
    assert length.next_limit(pays=False) == 0 and length.rest == 2 * REST_STEPS, "rests double"
    for _ in range(2 * REST_STEPS):
        length.record(0, 0)
    assert length.next_limit(pays=False) == 1
    assert length.next_limit(pays=True) == length.limit > 1
    assert length.next_limit(pays=False) == 0 and length.rest == REST_STEPS, "paying again resets the rests"


def test_a_steps_drafts_are_cut_to_the_shortest_so_it_stays_one_micro_batch() -> None:
    seqs = [Sequence(request_id=f"s{i}", prompt=[1], max_tokens=9, arrival_s=0.0) for i in range(3)]

    def item(seq: Sequence, draft: tuple[int, ...]) -> BatchItem:
        return BatchItem(seq, [7, *draft], 5, True, draft)

    cut = even_drafts([item(seqs[0], (1, 2, 3)), item(seqs[1], (4, 5)), item(seqs[2], (6, 7, 8, 9))])
    assert [i.draft for i in cut] == [(1, 2), (4, 5), (6, 7)]
    assert [i.tokens for i in cut] == [[7, 1, 2], [7, 4, 5], [7, 6, 7]]
    assert [i.draft for i in even_drafts([item(seqs[0], (1, 2)), item(seqs[1], ())])] == [(), ()]
    alone = [item(seqs[0], (1, 2, 3))]
    assert even_drafts(alone) == alone
