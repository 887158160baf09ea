import pytest

from llmhost.engine.speculative import NgramIndex


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
