"""The engine's view of a thought: which tokens are thought, which answer, and the budget's forced end."""

from __future__ import annotations

import pytest

from llmhost.engine.request import ParamError, Thinking
from llmhost.engine.sample.thinking import Phase, ThoughtTracker

START, END, END2 = 10, 11, 12


def test_a_thought_then_its_answer() -> None:
    tracker = ThoughtTracker(Thinking((START,), (END,)), constrained=False)
    sides = [tracker.accept(t) for t in (START, 1, 2, 3, END, 4, 5)]
    assert sides == [False, False, False, False, False, True, True]
    assert tracker.reasoning_tokens == 3


def test_no_thought_is_all_answer() -> None:
    tracker = ThoughtTracker(Thinking((START,), (END,)), constrained=False)
    assert [tracker.accept(t) for t in (7, START, END)] == [True, True, True]
    assert tracker.reasoning_tokens == 0


def test_a_prompt_that_opened_it() -> None:
    tracker = ThoughtTracker(Thinking((START,), (END,), opened=True), constrained=False)
    assert tracker.may_open is None
    assert [tracker.accept(t) for t in (1, END, 2)] == [False, False, True]
    assert tracker.reasoning_tokens == 1


@pytest.mark.parametrize("budget", [0, 1, 3])
def test_the_budget_forces_the_end_tag(budget: int) -> None:
    tracker = ThoughtTracker(Thinking((START,), (END, END2), opened=True, budget=budget), constrained=False)
    taken = []
    model = iter([1, 2, 3, 4, 5, 6, 7])
    while not tracker.answering:
        forced = tracker.forced()
        token = forced if forced is not None else next(model)
        taken.append(token)
        tracker.accept(token)
    assert taken == [*[1, 2, 3][:budget], END, END2]
    assert tracker.reasoning_tokens == budget
    assert tracker.forced() is None


def test_a_cut_end_tag_inside_the_thought_is_thought() -> None:
    tracker = ThoughtTracker(Thinking((START,), (END, END2), opened=True, budget=3), constrained=False)
    for t in (1, END, 2):
        assert tracker.forced() is None
        assert tracker.accept(t) is False
    assert tracker.reasoning_tokens == 3
    assert tracker.forced() == END
    tracker.accept(END)
    assert tracker.forced() == END2
    tracker.accept(END2)
    assert tracker.phase is Phase.ANSWER


def test_a_budget_spent_mid_end_tag_finishes_that_tag() -> None:
    tracker = ThoughtTracker(Thinking((START,), (END, END2), opened=True, budget=1), constrained=False)
    tracker.accept(1)
    tracker.accept(END)  # the model began the end tag itself
    assert tracker.forced() == END2


def test_a_constrained_answer_opens_with_the_whole_start_tag() -> None:
    tracker = ThoughtTracker(Thinking((START, 20), (END,)), constrained=True)
    assert tracker.may_open == START
    assert tracker.forced() is None
    tracker.accept(START)
    assert tracker.forced() == 20
    tracker.accept(20)
    assert tracker.phase is Phase.THINKING


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ParamError, match="reasoning_budget"):
        Thinking((START,), (END,), budget=-1)
