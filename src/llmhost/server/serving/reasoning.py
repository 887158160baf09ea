"""A thinking model's output split into its thought and its answer (OpenAI `reasoning_content`, Anthropic
`thinking` blocks, Responses `reasoning` items), as llama-server's `--reasoning-format deepseek` splits it:
the thought is what lies between the template's start and end tags at the start of the output (or from
the start, when the prompt already opened it), stripped of surrounding whitespace; the answer is what
follows the end tag, its leading whitespace dropped. An unclosed thought is all thought. A start tag
anywhere but the start, or a tag inside the thought, is text.

Output processing apart from the engine step: the parser reads text deltas, whatever their cut (a tag
may arrive split across any number of tokens), and holds back only what may still be part of a tag or
whitespace whose side is not decided yet.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class ThinkSyntax:
    """The tags a model's thought is written between, as text. `end` is the end tag the model writes
    (the engine forces and recognizes its tokens); `also_ends` are the forms the text may show it in
    (gpt-oss's `<|end|>` is left out of the text by some llama.cpp versions)."""

    name: str
    start: str
    end: str
    also_ends: tuple[str, ...] = ()
    answer_start: str = ""  # what opens an answer given without a thought (dropped, as the tags are)

    @property
    def ends(self) -> tuple[str, ...]:
        return (self.end, *self.also_ends)


# --reasoning-format's tag families; `auto` picks the first whose start tag the chat template writes
SYNTAXES = {
    "deepseek": ThinkSyntax("deepseek", "<think>", "</think>"),  # Qwen3, DeepSeek-R1, SmolLM3, Granite
    "magistral": ThinkSyntax("magistral", "[THINK]", "[/THINK]"),  # Mistral's Magistral
    "seed": ThinkSyntax("seed", "<seed:think>", "</seed:think>"),  # ByteDance Seed-OSS
    # gpt-oss's harmony channels: the analysis channel is the thought; the next assistant message is
    # the answer, on the final channel (its header dropped) or a tool call on the commentary channel
    # (kept for the tool parser). llama.cpp renders <|channel|>, <|message|> and <|start|> as text.
    "harmony": ThinkSyntax(
        "harmony",
        "<|channel|>analysis<|message|>",
        "<|end|><|start|>assistant",
        also_ends=("<|start|>assistant",),
        answer_start="<|channel|>final<|message|>",
    ),
}
FORMATS = ("auto", "none", *SYNTAXES)


def syntax_for(reasoning_format: str, template_source: str) -> ThinkSyntax | None:
    """The tags of `--reasoning-format` (None: `none`, or `auto` with a template that writes no thought)."""
    if reasoning_format == "none":
        return None
    if reasoning_format != "auto":
        return SYNTAXES[reasoning_format]
    found = [s for s in SYNTAXES.values() if s.start in template_source]
    return found[0] if found else None


def opened_by(prompt: str, syntax: ThinkSyntax) -> bool:
    """The rendered prompt ends inside an open thought (Qwen3-style templates, DeepSeek-R1's)."""
    tail = prompt.rstrip()
    return tail.endswith(syntax.start)


class _State(enum.Enum):
    START = "start"  # nothing decided: the output may open a thought (leading whitespace held)
    THINKING = "thinking"  # inside the thought, until the end tag
    CLOSED = "closed"  # the end tag seen: whitespace after it is dropped
    ANSWER = "answer"  # the rest is the answer


def _partial(text: str, tag: str) -> int:
    """The length of the longest end of `text` that is a proper start of `tag`."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class ReasoningSplitter:
    """One choice's output as it streams: each `feed` gives the (thought, answer) text safe to send."""

    def __init__(self, syntax: ThinkSyntax, opened: bool) -> None:
        self.syntax = syntax
        self._state = _State.THINKING if opened else _State.START
        self._held = ""
        self._thought_started = False  # leading whitespace of the thought is dropped

    @property
    def thinking(self) -> bool:
        return self._state is _State.THINKING

    def feed(self, text: str) -> tuple[str, str]:
        buf, self._held = self._held + text, ""
        thought, answer = "", ""
        while buf:
            if self._state is _State.START:
                buf = self._start(buf)
            elif self._state is _State.THINKING:
                piece, buf = self._think(buf)
                thought += piece
            elif self._state is _State.CLOSED:
                buf = self._closed(buf.lstrip())
            else:
                answer, buf = answer + buf, ""
        return thought, answer

    def finish(self) -> tuple[str, str]:
        """What was held at the end: a cut tag is text; an unclosed thought stays thought."""
        held, self._held = self._held, ""
        if self._state is _State.START:
            return "", held
        if self._state is _State.THINKING:
            return (held.rstrip() if self._thought_started else held.strip()), ""
        return "", held  # CLOSED: an answer's opening tag cut short is text

    def _start(self, buf: str) -> str:
        head = buf.lstrip()
        start, answer = self.syntax.start, self.syntax.answer_start
        if head.startswith(start):
            self._state = _State.THINKING
            return head[len(start) :]
        if answer and head.startswith(answer):
            self._state = _State.ANSWER
            return head[len(answer) :]
        if start.startswith(head) or (answer and answer.startswith(head)):  # a tag cut short: wait
            self._held = buf
            return ""
        self._state = _State.ANSWER
        return buf

    def _closed(self, buf: str) -> str:
        """After the end tag: the answer's own opening tag (if the format has one) is dropped."""
        answer = self.syntax.answer_start
        if not buf:
            return ""
        if answer and buf.startswith(answer):
            self._state = _State.ANSWER
            return buf[len(answer) :]
        if answer and answer.startswith(buf):
            self._held = buf
            return ""
        self._state = _State.ANSWER
        return buf

    def _think(self, buf: str) -> tuple[str, str]:
        """The thought text to send now, and what is left of `buf` to read in the next state."""
        if not self._thought_started:
            buf = buf.lstrip()
            if not buf:
                return "", ""
            self._thought_started = True
        found = [(i, tag) for tag in self.syntax.ends if (i := buf.find(tag)) >= 0]
        if found:
            end, tag = min(found, key=lambda f: (f[0], -len(f[1])))
            self._state = _State.CLOSED
            return buf[:end].rstrip(), buf[end + len(tag) :]
        keep = max(_partial(buf, tag) for tag in self.syntax.ends)
        body = buf[: len(buf) - keep]
        # trailing whitespace waits: it is dropped if the end tag comes next
        stripped = body.rstrip()
        self._held = body[len(stripped) :] + buf[len(buf) - keep :]
        return stripped, ""


def split(text: str, syntax: ThinkSyntax, opened: bool) -> tuple[str | None, str]:
    """The thought (None when there is none) and the answer of a whole output."""
    splitter = ReasoningSplitter(syntax, opened)
    thought, answer = splitter.feed(text)
    more_thought, more_answer = splitter.finish()
    thought += more_thought
    return (thought or None), answer + more_answer
