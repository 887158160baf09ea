"""The thought / answer split over every cut of the output into streamed pieces."""

from __future__ import annotations

import itertools

import pytest

from llmhost.server.serving.reasoning import (
    FORMATS,
    SYNTAXES,
    ReasoningSplitter,
    opened_by,
    split,
    syntax_for,
)
from llmhost.settings.serve import SERVE_SPEC

THINK = SYNTAXES["deepseek"]


def streamed(text: str, cuts: list[int], opened: bool) -> tuple[str, str, list[tuple[str, str]]]:
    """The text fed in pieces cut at `cuts`: the thought, the answer, and each piece's deltas."""
    splitter = ReasoningSplitter(THINK, opened)
    bounds = [0, *cuts, len(text)]
    deltas = [splitter.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    deltas.append(splitter.finish())
    return "".join(t for t, _ in deltas), "".join(a for _, a in deltas), deltas


CASES = [
    # (output, prompt opened the thought, thought, answer)
    ("<think>\nI add 2 and 2.\n</think>\n\nIt is 4.", False, "I add 2 and 2.", "It is 4."),
    ("\nI add.\n</think>\n\n4", True, "I add.", "4"),
    ("Just the answer.", False, None, "Just the answer."),
    ("  indented answer", False, None, "  indented answer"),
    ("<think>\n\n</think>\n\nNo thought.", False, None, "No thought."),
    ("<think>still thinking, cut by max_tokens", False, "still thinking, cut by max_tokens", ""),
    ("<think>a <think> inside</think>b", False, "a <think> inside", "b"),
    ("<think>x</think>y</think>z <think>w", False, "x", "y</think>z <think>w"),
    ("answer with </think> in it", False, None, "answer with </think> in it"),
    ("<thin", False, None, "<thin"),
    ("<think>a\n\n b </thi", False, "a\n\n b </thi", ""),
    ("é<think>ü</think>", False, None, "é<think>ü</think>"),
    ("<think>über</think>\n\nça", False, "über", "ça"),
    (
        '<think>call it</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
        False,
        "call it",
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
    ),
]


@pytest.mark.parametrize(("text", "opened", "thought", "answer"), CASES)
def test_whole_output(text: str, opened: bool, thought: str | None, answer: str) -> None:
    assert split(text, THINK, opened) == (thought, answer)


@pytest.mark.parametrize(("text", "opened", "thought", "answer"), CASES)
def test_every_single_cut(text: str, opened: bool, thought: str | None, answer: str) -> None:
    for cut in range(1, len(text)):
        got_thought, got_answer, _ = streamed(text, [cut], opened)
        assert (got_thought or None, got_answer) == (thought, answer), cut


@pytest.mark.parametrize(("text", "opened", "thought", "answer"), CASES)
def test_one_character_at_a_time(text: str, opened: bool, thought: str | None, answer: str) -> None:
    got_thought, got_answer, deltas = streamed(text, list(range(1, len(text))), opened)
    assert (got_thought or None, got_answer) == (thought, answer)
    # the thought comes first: no thought delta after the first answer delta
    first_answer = next((i for i, (_, a) in enumerate(deltas) if a), len(deltas))
    assert not any(t for t, _ in deltas[first_answer + 1 :])


def test_thought_streams_before_its_end_tag() -> None:
    splitter = ReasoningSplitter(THINK, opened=False)
    assert splitter.feed("<think>\nfirst") == ("first", "")
    assert splitter.feed(" second </") == (" second", "")
    assert splitter.thinking
    assert splitter.feed("think>\n\nanswer") == ("", "answer")
    assert not splitter.thinking


def test_other_families() -> None:
    magistral = SYNTAXES["magistral"]
    assert split("[THINK]hmm[/THINK]ok", magistral, False) == ("hmm", "ok")
    assert split("<seed:think>s</seed:think>t", SYNTAXES["seed"], False) == ("s", "t")


@pytest.mark.parametrize("end", ["", "<|end|>"])  # llama.cpp writes <|end|> out in some versions only
def test_harmony_channels(end: str) -> None:
    """gpt-oss's output as llama.cpp renders it, cut at every character."""
    harmony = SYNTAXES["harmony"]
    tool = "<|channel|>commentary to=functions.f <|message|>{}"
    final = "<|channel|>final<|message|>4"
    cases = {  # text: (thought, answer)
        f"<|channel|>analysis<|message|>Add them.{end}<|start|>assistant{final}": ("Add them.", "4"),
        final: (None, "4"),
        # a tool call after the thought stays in the answer, for the harmony tool parser
        f"<|channel|>analysis<|message|>Call it.{end}<|start|>assistant{tool}": ("Call it.", tool),
    }
    for text, expected in cases.items():
        assert split(text, harmony, False) == expected
        for cut in range(1, len(text)):
            splitter = ReasoningSplitter(harmony, False)
            parts = [splitter.feed(text[:cut]), splitter.feed(text[cut:]), splitter.finish()]
            thought, answer = "".join(t for t, _ in parts), "".join(a for _, a in parts)
            assert (thought or None, answer) == expected, (text, cut)


def test_format_from_the_template() -> None:
    qwen3 = "{%- if enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    assert syntax_for("auto", qwen3) == THINK
    assert syntax_for("auto", "{{ '[THINK]' }}") == SYNTAXES["magistral"]
    assert syntax_for("auto", "{{ messages[0].content }}") is None
    assert syntax_for("none", qwen3) is None
    assert syntax_for("deepseek", "{{ messages[0].content }}") == THINK


def test_a_prompt_that_opens_the_thought() -> None:
    assert opened_by("<|im_start|>assistant\n<think>\n", THINK)
    assert not opened_by("<|im_start|>assistant\n<think>\n\n</think>\n\n", THINK)
    assert not opened_by("<|im_start|>assistant\n", THINK)


def test_the_formats_are_the_settings_choices() -> None:
    assert SERVE_SPEC["reasoning_format"].choices == FORMATS
