"""Pure logic of the embeddings routes: an input cut to its limit with its special tokens kept (Ollama's
and TEI's `truncate`), and TEI's error shape."""

from __future__ import annotations

import pytest

from llmhost.server.serving.apis.truncation import Cut, cut_inputs, cut_tokens
from llmhost.web.errors import error_body
from llmhost.web.formats import tei_error

BOS, CLS, SEP = 2, 101, 102


def test_a_text_within_its_limit_is_kept() -> None:
    assert cut_tokens([BOS, 5, 6], [5, 6], Cut(3)) == [BOS, 5, 6]


@pytest.mark.parametrize(
    ("tokens", "plain", "cut", "want"),
    [
        ([BOS, 5, 6, 7, 8], [5, 6, 7, 8], Cut(3), [BOS, 5, 6]),
        ([BOS, 5, 6, 7, 8], [5, 6, 7, 8], Cut(3, "Left"), [BOS, 7, 8]),
        ([CLS, 5, 6, 7, 8, SEP], [5, 6, 7, 8], Cut(4), [CLS, 5, 6, SEP]),
        ([CLS, 5, 6, 7, 8, SEP], [5, 6, 7, 8], Cut(4, "Left"), [CLS, 7, 8, SEP]),
        ([CLS, 5, 6, SEP], [5, 6], Cut(1), [CLS]),  # no room for the text: the specials, cut
        ([9, 6, 7, 8], [5, 6, 7, 8], Cut(2), [9, 6]),  # the plain tokens not found: cut as they are
    ],
)
def test_the_special_tokens_stay_whichever_end_is_cut(
    tokens: list[int], plain: list[int], cut: Cut, want: list[int]
) -> None:
    assert cut_tokens(tokens, plain, cut) == want


def test_only_the_texts_over_the_limit_are_tokenized_again() -> None:
    asked: list[str] = []

    def plain(text: str) -> list[int]:
        asked.append(text)
        return [5, 6, 7]

    inputs: list[str | list[int]] = ["short", "long", [1, 2, 3, 4]]
    tokens = [[BOS, 5], [BOS, 5, 6, 7], [1, 2, 3, 4]]
    assert cut_inputs(inputs, tokens, Cut(3, "Left"), plain) == [[BOS, 5], [BOS, 6, 7], [2, 3, 4]]
    assert asked == ["long"]


@pytest.mark.parametrize(
    ("status", "kind"),
    [(422, "Validation"), (400, "Validation"), (429, "Overloaded"), (503, "Unhealthy"), (500, "Backend")],
)
def test_tei_errors_carry_teis_types(status: int, kind: str) -> None:
    body = error_body(status, "inputs: too long", field="inputs", request_id="r1", limit=48)
    assert tei_error(status, body) == (
        status,
        {"error": "inputs: too long", "error_type": kind, "field": "inputs", "limit": 48, "request_id": "r1"},
    )


def test_a_refusal_may_name_its_tei_type() -> None:
    body = error_body(400, "inputs cannot be empty", field="inputs", error_type="Empty")
    want = {"error": "inputs cannot be empty", "error_type": "Empty", "field": "inputs"}
    assert tei_error(400, body)[1] == want
