"""Prefix-aware routing: send a request to the copy most likely to hold its prompt's prefix in its KV
(or prefix cache), so a conversation's turns, or requests sharing a long system prompt, reuse what a
copy already computed instead of prefilling it again on another.

The router never loads a tokenizer: it reads the prompt's text (a completion's `prompt`, the chat
messages rendered as role and content in order, Anthropic's `system` first, a Responses `input`, TGI's
`inputs`), cuts it into blocks of `block_chars` characters and hashes them chained (a block's hash
covers every character before it), as vLLM hashes KV blocks. An LRU index remembers, for each block
hash, the copy a prompt holding it was last sent to. A request goes to the copy holding the most
leading blocks of its prompt; the next turn of a conversation extends the previous turn's prompt, so it
matches every full block of it. Only full blocks count: a prompt shorter than one block is routed by
load alone.

Bounded load ("consistent hashing with bounded loads", Mirrokni et al.): a copy whose outstanding
requests exceed `(1 + load_factor) × mean + 1` (the mean over the copies that may take the request) is
skipped, so a hot prefix cannot pile onto one copy while others idle; the next best match within the
bound takes it, else the least outstanding copy. The chosen copy is then recorded for every block of
the prompt, so a spilled conversation continues where it went.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

T = TypeVar("T")


class Policy(StrEnum):
    LEAST_OUTSTANDING = "least_outstanding"  # the copy with the fewest requests in flight
    PREFIX = "prefix"  # the copy holding the prompt's prefix, within the load bound (module docstring)


class Decision(StrEnum):
    # sent to the copy holding the longest prefix of the prompt
    PREFIX = "prefix"
    # a copy held a prefix but was over the load bound (or could not take it): sent elsewhere
    SPILLED = "spilled"
    # no copy known to hold any full block of the prompt (or no prompt text): least outstanding
    COLD = "cold"


def _content(value: Any) -> str:
    """A message's content: its text, or the text parts of a list of parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in value)
    return "" if value is None else json.dumps(value, sort_keys=True)


def _messages(messages: list[Any]) -> str:
    return "".join(
        f"<{m.get('role', '')}>{_content(m.get('content'))}\n" for m in messages if isinstance(m, dict)
    )


def prompt_text(body: bytes) -> str | None:
    """The prompt's text as the router sees it (module docstring); None when the body has none."""
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("messages"), list):
        system = _content(data.get("system")) if data.get("system") is not None else ""
        return (f"<system>{system}\n" if system else "") + _messages(data["messages"])
    for key in ("prompt", "input", "inputs"):
        value = data.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value:
            if all(isinstance(v, dict) for v in value):
                return _messages(value)
            return str(value[0]) if isinstance(value[0], str) else json.dumps(value[0])
    return None


def block_hashes(text: str, block_chars: int, max_blocks: int) -> list[bytes]:
    """Chained hashes of the full blocks of ``text`` (at most ``max_blocks``)."""
    out: list[bytes] = []
    h = b""
    for i in range(min(len(text) // block_chars, max_blocks)):
        block = text[i * block_chars : (i + 1) * block_chars].encode()
        h = hashlib.blake2b(h + block, digest_size=12).digest()
        out.append(h)
    return out


class PrefixIndex:
    """Block hash → the copy last sent a prompt holding it; least recently used forgotten first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("the prefix index holds at least one block")
        self.capacity = capacity
        self._blocks: OrderedDict[bytes, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def matches(self, hashes: Sequence[bytes]) -> dict[str, int]:
        """Copy → how many leading blocks of the prompt it was sent (its deepest block: hashes are
        chained, so holding block i means holding the prompt up to it)."""
        out: dict[str, int] = {}
        for depth, h in enumerate(hashes, 1):
            copy = self._blocks.get(h)
            if copy is not None:
                out[copy] = depth
        return out

    def record(self, hashes: Sequence[bytes], copy: str) -> None:
        for h in hashes:
            self._blocks[h] = copy
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)

    def forget(self, copy: str) -> None:
        """A copy that stopped or restarted holds nothing any more."""
        for h in [h for h, c in self._blocks.items() if c == copy]:
            del self._blocks[h]


def over_bound(load: float, loads: Sequence[float], load_factor: float) -> bool:
    """Whether a copy at ``load`` is over the bound among copies at ``loads`` (module docstring)."""
    mean = sum(loads) / len(loads) if loads else 0.0
    return load > (1.0 + load_factor) * mean + 1.0


def choose(
    candidates: Sequence[T],
    key: Callable[[T], str],
    load: Callable[[T], float],
    matched: dict[str, int],
    load_factor: float,
    fallback: Callable[[Sequence[T]], T],
) -> tuple[T, Decision]:
    """The copy for a request whose prompt's leading blocks ``matched`` (copy key → blocks) the
    copies hold: the longest match within the load bound (fewer outstanding first among equals), else
    ``fallback`` (least outstanding). A match held only by a copy that cannot take the request (not
    among ``candidates``) counts as spilled."""
    if not candidates:
        raise ValueError("no copy to choose from")
    ranked = sorted(
        (c for c in candidates if matched.get(key(c), 0) > 0), key=lambda c: (-matched[key(c)], load(c))
    )
    loads = [load(c) for c in candidates]
    for i, c in enumerate(ranked):
        if not over_bound(load(c), loads, load_factor):
            return c, Decision.PREFIX if i == 0 else Decision.SPILLED
    return fallback(candidates), Decision.SPILLED if matched else Decision.COLD


@dataclass
class Affinity:
    """One component's prefix-aware routing state: its index and its decision counts."""

    block_chars: int = 256
    load_factor: float = 0.25
    capacity_blocks: int = 65536
    max_blocks: int = 512  # blocks hashed per prompt: its first block_chars × max_blocks characters
    decisions: dict[Decision, int] = field(default_factory=lambda: dict.fromkeys(Decision, 0))

    def __post_init__(self) -> None:
        if self.block_chars < 1 or self.load_factor < 0 or self.max_blocks < 1:
            raise ValueError("block_chars and max_blocks must be >= 1, load_factor >= 0")
        self.index = PrefixIndex(self.capacity_blocks)

    def hashes(self, body: bytes) -> list[bytes]:
        text = prompt_text(body)
        return block_hashes(text, self.block_chars, self.max_blocks) if text else []

    def decide(
        self,
        hashes: Sequence[bytes],
        candidates: Sequence[T],
        key: Callable[[T], str],
        load: Callable[[T], float],
        fallback: Callable[[Sequence[T]], T],
    ) -> tuple[T, Decision]:
        """The copy among ``candidates`` for a prompt of these block ``hashes``, and why."""
        matched = self.index.matches(hashes) if hashes else {}
        return choose(candidates, key, load, matched, self.load_factor, fallback)

    def routed(self, hashes: Sequence[bytes], copy: str, decision: Decision) -> None:
        """The request went to ``copy``: count why, and remember it holds the prompt."""
        self.decisions[decision] += 1
        self.index.record(hashes, copy)

    def pick(
        self,
        hashes: Sequence[bytes],
        candidates: Sequence[T],
        key: Callable[[T], str],
        load: Callable[[T], float],
        fallback: Callable[[Sequence[T]], T],
    ) -> T:
        """Choose among ``candidates``, count the decision, and remember the choice for the prompt."""
        chosen, decision = self.decide(hashes, candidates, key, load, fallback)
        self.routed(hashes, key(chosen), decision)
        return chosen


# Ray builds a component's request router inside each deployment handle (`rayserve.prefixroute`): the
# routers of this process register here, by component, for the ingress's /metrics and /admin/status.
# The ingress's handle of a component builds its router on the handle's first request, not before
RAY_ROUTERS: dict[str, Affinity] = {}


def register_ray_router(component: str, affinity: Affinity) -> None:
    """The router's one way to the registry: Ray pickles the router's module by value, so a module-level
    dict it named would be a copy in the ingress; this function travels by reference."""
    RAY_ROUTERS[component] = affinity


def ray_decisions(component: str) -> dict[Decision, int]:
    """The decisions of the request router of this process's handle of ``component``: none made before
    its first request (Ray had not built the router yet), so counters read from the start are there and
    at zero, and a rate over them has its first point."""
    affinity = RAY_ROUTERS.get(component)
    return dict(affinity.decisions) if affinity is not None else dict.fromkeys(Decision, 0)
