"""The conversation workload (``llmhost bench run --workload conversations``): users holding multi-turn
conversations, each turn resending the whole conversation so far with the model's answers in it.

A conversation is a system prompt (shared by a group of users: user ``u`` has system prompt ``u mod
system_prompts``), user messages, and a think time before each turn (the first counted from the start
of the level, later ones from the end of the previous answer). Generated conversations are drawn from a
seed: the same seed, user and settings give the same text and think times whatever the number of
users, so a level of 6 users sends what the first 6 users of a level of 12 send. The text is made of
words from the built-in prompts, about ``CHARS_PER_TOKEN`` characters per token (the server's usage
reports the exact counts).

A conversations file is JSONL, one conversation per line::

    {"system": "You are a helpful assistant.", "turns": ["Hi!", "Tell me more."],
     "think_s": [0.5, 3.0], "max_tokens": 64}

``turns`` (required): the user messages, in order; ``system`` (optional): the system prompt;
``think_s`` (optional): seconds before each turn, else drawn from the think-time range; ``max_tokens``
(optional): the answer length of its turns. User ``u`` holds line ``u mod lines``.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# how a completion prompt renders a conversation (a base model continues after "Assistant:")
USER_PREFIX = "User: "
ASSISTANT_PREFIX = "Assistant:"


@dataclass(frozen=True)
class ConversationSettings:
    """What conversations a level's users hold (the number of users is the level)."""

    turns: int = 4
    system_prompts: int = 4  # distinct system prompts; user u has u mod system_prompts
    system_prompt_tokens: int = 600  # approximate length of each (0: no system prompt)
    user_tokens: int = 48  # approximate length of each user message
    think_time_s: tuple[float, float] = (2.0, 5.0)  # uniform range of the think time before a turn
    file: str | None = None  # a conversations file (module docstring) instead of generated ones
    seed: int = 0

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError("--turns must be at least 1")
        if self.system_prompts < 1:
            raise ValueError("--system-prompts must be at least 1")
        if self.system_prompt_tokens < 0 or self.user_tokens < 1:
            raise ValueError("--system-prompt-tokens must be >= 0 and --user-tokens >= 1")
        low, high = self.think_time_s
        if not 0 <= low <= high:
            raise ValueError(f"--think-time: expected 0 <= MIN <= MAX seconds, got {low:g}-{high:g}")


@dataclass(frozen=True)
class Conversation:
    user: int
    system: str | None
    group: int | None  # the system prompt's index (generated conversations)
    messages: tuple[str, ...]  # the user's turns
    think_s: tuple[float, ...]  # seconds before each turn
    max_new_tokens: int | None = None  # its answers' length; None: the run's

    def completion_prompt(self, answers: list[str]) -> str:
        """The whole conversation so far as one text, ending where the next answer starts: turn
        ``len(answers)`` extends the previous turn's prompt and answer exactly."""
        parts = [f"{self.system}\n\n"] if self.system else []
        for i, message in enumerate(self.messages[: len(answers) + 1]):
            if i:
                parts.append("\n")
            parts.append(f"{USER_PREFIX}{message}\n{ASSISTANT_PREFIX}")
            if i < len(answers):
                parts.append(answers[i])
        return "".join(parts)

    def chat_messages(self, answers: list[str]) -> list[dict[str, str]]:
        """The conversation so far as chat messages, ending with the next user message."""
        out = [{"role": "system", "content": self.system}] if self.system else []
        for i, message in enumerate(self.messages[: len(answers) + 1]):
            out.append({"role": "user", "content": message})
            if i < len(answers):
                out.append({"role": "assistant", "content": answers[i]})
        return out


def parse_think_time(text: str) -> tuple[float, float]:
    """``"2,5"`` or ``"2-5"`` → (2.0, 5.0); one value: a fixed think time."""
    try:
        numbers = [float(x) for x in text.replace("-", ",").replace(" ", "").split(",") if x]
    except ValueError:
        numbers = []
    if len(numbers) == 1:
        numbers *= 2
    if len(numbers) != 2:
        raise ValueError(f"--think-time: MIN,MAX seconds (or one value), got {text!r}")
    return numbers[0], numbers[1]


def _vocabulary() -> list[str]:
    # imported here: `llmhost tune`'s command line reads this module's defaults without the HTTP client
    from llmhost.bench.load.workload import builtin_prompts

    words = re.findall(r"[a-z]+", " ".join(text for text, _ in builtin_prompts()).lower())
    return sorted(set(words))


def _text(rng: random.Random, words: list[str], tokens: int) -> str:
    """Sentences of random words, about ``tokens`` tokens long."""
    from llmhost.bench.load.workload import CHARS_PER_TOKEN

    chars = tokens * CHARS_PER_TOKEN
    sentences: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 14)))
        sentence = sentence[0].upper() + sentence[1:] + "."
        sentences.append(sentence)
        size += len(sentence) + 1
    return " ".join(sentences)


def _think(rng: random.Random, settings: ConversationSettings, turns: int) -> tuple[float, ...]:
    low, high = settings.think_time_s
    return tuple(round(rng.uniform(low, high), 3) for _ in range(turns))


def generate(settings: ConversationSettings, users: range) -> list[Conversation]:
    """The generated conversations of ``users`` (module docstring)."""
    words = _vocabulary()
    systems: dict[int, str | None] = {}
    out = []
    for u in users:
        group = u % settings.system_prompts
        if group not in systems:
            sys_rng = random.Random(f"{settings.seed}:system:{group}")
            tokens = settings.system_prompt_tokens
            systems[group] = f"System prompt {group}. {_text(sys_rng, words, tokens)}" if tokens else None
        rng = random.Random(f"{settings.seed}:user:{u}")
        messages = tuple(_text(rng, words, settings.user_tokens) for _ in range(settings.turns))
        out.append(Conversation(u, systems[group], group, messages, _think(rng, settings, settings.turns)))
    return out


# a file's conversation: system prompt, user turns, think times (None: drawn), answer length (None: the run's)
Line = tuple[str | None, tuple[str, ...], tuple[float, ...] | None, int | None]


def _line(obj: Any, where: str) -> Line:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object with 'turns'")
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
        raise ValueError(f"{where}: 'turns' must be a non-empty list of non-empty strings")
    system = obj.get("system")
    if system is not None and not isinstance(system, str):
        raise ValueError(f"{where}: 'system' must be a string")
    think = obj.get("think_s")
    if think is not None and (
        not isinstance(think, list)
        or len(think) != len(turns)
        or not all(isinstance(t, int | float) and t >= 0 for t in think)
    ):
        raise ValueError(f"{where}: 'think_s' must list one number >= 0 per turn ({len(turns)})")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"{where}: 'max_tokens' must be an integer >= 1")
    unknown = set(obj) - {"system", "turns", "think_s", "max_tokens"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    return system or None, tuple(turns), tuple(float(t) for t in think) if think else None, max_tokens


def load_file(path: str | Path) -> list[Line]:
    """The conversations of a file (module docstring); ValueError names the line that is wrong."""
    p = Path(path)
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{p}:{n}: not JSON: {exc}") from exc
        out.append(_line(obj, f"{p}:{n}"))
    if not out:
        raise ValueError(f"{p}: no conversations")
    return out


def from_file(settings: ConversationSettings, users: range) -> list[Conversation]:
    assert settings.file is not None
    lines = load_file(settings.file)
    out = []
    for u in users:
        system, messages, think, max_tokens = lines[u % len(lines)]
        if think is None:
            think = _think(random.Random(f"{settings.seed}:user:{u}"), settings, len(messages))
        out.append(Conversation(u, system, None, messages, think, max_tokens))
    return out


def conversations(settings: ConversationSettings, users: range) -> list[Conversation]:
    """The conversations of ``users``: from the file when there is one, else generated."""
    return from_file(settings, users) if settings.file else generate(settings, users)


def describe(settings: ConversationSettings, convs: list[Conversation]) -> dict[str, Any]:
    """The workload as a results file records it."""
    first = [c.completion_prompt([]) for c in convs]
    return {
        "source": f"file:{settings.file}" if settings.file else "generated conversations",
        "conversations": len(convs),
        "turns": max((len(c.messages) for c in convs), default=0),
        "system_prompts": len({c.system for c in convs if c.system}),
        "first_prompt_chars_mean": sum(map(len, first)) / len(first) if first else 0.0,
        "think_time_s": list(settings.think_time_s),
        "seed": settings.seed,
        "token_count_method": "server usage",
    }
