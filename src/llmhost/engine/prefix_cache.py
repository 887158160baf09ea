"""Which llama.cpp sequence ids are free, running or idle-with-reusable-KV.

Pure bookkeeping: it returns the KV operations to perform; the runner performs them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class KvCopy:
    """Share the first `n_tokens` of `src`'s KV with `dst` (llama_memory_seq_cp)."""

    src: int
    dst: int
    n_tokens: int


@dataclass(slots=True, frozen=True)
class KvTrim:
    """Forget positions >= `keep` of `seq` (llama_memory_seq_rm(seq, keep, -1))."""

    seq: int
    keep: int


@dataclass(slots=True, frozen=True)
class KvSave:
    """`seq`'s KV holding `tokens` is about to be dropped or trimmed: keep its state in host memory
    (the engine's host cache tier) first. Only planned when that tier is on."""

    seq: int
    tokens: tuple[int, ...]


@dataclass(slots=True, frozen=True)
class KvRestore:
    """Load a state saved in host memory into `seq` (empty), keeping its first `keep` positions."""

    seq: int
    keep: int
    data: bytes = field(repr=False)
    n_state_tokens: int = 0  # positions the state holds (>= keep)


# what llama.cpp performs on the context
KvEdit = KvCopy | KvTrim
# what a step plans: edits, and states moved between the context and host memory
KvOp = KvCopy | KvTrim | KvSave | KvRestore


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """Leading tokens `a` and `b` share: bisection over slice comparisons (done in C), since prompts
    of thousands of tokens are compared against every cached sequence at each admission."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # a[:lo] == b[:lo] and a[:hi+1] != b[:hi+1]
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def reusable(shared: int, prompt: list[int]) -> int:
    """Of `shared` leading tokens of `prompt` held somewhere, those it can take instead of computing: all
    but its last, which is always decoded (its logits give the first new token)."""
    return min(shared, len(prompt) - 1)


@dataclass(slots=True, frozen=True)
class PrefixMatch:
    kv_seq: int  # the sequence id the new request gets
    n_reused: int  # prompt tokens already in its KV
    ops: tuple[KvOp, ...]


class PrefixCache:
    """Idle KV sequences kept for reuse, LRU-evicted beyond their token room or when ids run out.

    The room is `max_tokens` (KV set aside for idle prefixes) plus what the owner says no running
    sequence can come to need (`set_room`): KV reserved for requests but not used by them (a request of
    1,000 tokens in a slot of 2,048) keeps conversations in the context instead of evicting them.
    """

    def __init__(
        self,
        n_seq_ids: int,
        max_idle_seqs: int,
        max_tokens: int,
        spill_min_tokens: int = 0,
        kv_floor: Callable[[int], int] | None = None,
    ) -> None:
        """`spill_min_tokens` > 0: KV of at least that many tokens about to be dropped is first saved
        (`KvSave`) to the host cache tier. `kv_floor(kv_seq)`: the shortest prefix of a sequence's KV
        that can be reused (llama.cpp may have given a long sequence's first sliding-window cells
        away); None: every prefix."""
        self._free: list[int] = list(range(n_seq_ids - 1, -1, -1))
        self._idle: OrderedDict[int, list[int]] = OrderedDict()
        self._max_idle_seqs = max_idle_seqs
        self._max_tokens = max_tokens
        self._room = max_tokens  # idle tokens allowed now (>= max_tokens; 0: no idle caching)
        self._spill_min = spill_min_tokens
        self._kv_floor = kv_floor
        self.lookups = 0
        self.hits = 0
        self.reused_tokens = 0

    @property
    def idle_tokens(self) -> int:
        return sum(len(t) for t in self._idle.values())

    @property
    def idle_seqs(self) -> int:
        return len(self._idle)

    def can_acquire(self) -> bool:
        return bool(self._free or self._idle)

    def best_match(
        self, prompt: list[int], running: Iterable[tuple[int, list[int]]]
    ) -> tuple[int, int, bool]:
        """(kv_seq, tokens shared, is_idle) of the longest prefix among idle and running sequences
        whose KV can serve it."""
        best = (-1, 0, False)
        for seq_id, tokens in self._idle.items():
            n = common_prefix_len(prompt, tokens)
            if n > best[1] and self._serves(seq_id, reusable(n, prompt)):
                best = (seq_id, n, True)
        for seq_id, tokens in running:
            n = common_prefix_len(prompt, tokens)
            if n > best[1] and self._serves(seq_id, reusable(n, prompt)):
                best = (seq_id, n, False)
        return best

    def _serves(self, kv_seq: int, n_reused: int) -> bool:
        """Whether a prompt can take `kv_seq`'s first `n_reused` positions (at or above its KV floor)."""
        return self._kv_floor is None or n_reused >= self._kv_floor(kv_seq)

    def reuse_lost(self, n_tokens: int) -> None:
        """A prefix counted as reused was not in the context after all: it is prefilled instead."""
        self.hits -= 1
        self.reused_tokens -= n_tokens

    def acquire(
        self, prompt: list[int], running: Iterable[tuple[int, list[int]]], reuse: bool = True
    ) -> PrefixMatch:
        """Give a new request a sequence id, reusing the longest cached prefix of its prompt (unless
        `reuse` is off: the request needs the logits of every prompt position). An idle sequence whose
        first half or more the prompt repeats (its conversation's next turn) is taken over; one it
        shares less of is copied from while ids are free, so it stays for its own next turn."""
        if not self.can_acquire():
            raise RuntimeError("no KV sequence id available")
        self.lookups += 1
        src, shared, is_idle = self.best_match(prompt, list(running))
        shared = reusable(shared, prompt) if reuse else 0
        if shared > 0:
            self.hits += 1
            self.reused_tokens += shared
        if is_idle and shared > 0 and (not self._free or 2 * shared > len(self._idle[src])):
            return PrefixMatch(src, shared, tuple(self._drop_tail(src, self._idle.pop(src), shared)))
        if is_idle:  # sharing only its start (a system prompt, a BOS): keep the rest for its own next turn
            self._idle.move_to_end(src)
        ops: list[KvOp] = []
        dst = self._take_id(ops)
        if shared > 0:
            ops.append(KvCopy(src, dst, shared))
        return PrefixMatch(dst, shared, tuple(ops))

    def adopt(self, tokens: list[int]) -> int | None:
        """Take a free sequence id and register it as idle holding `tokens` (KV restored by the caller).

        None when nothing can be kept: no free id, caching disabled, or more tokens than allowed.
        """
        if not tokens or not self._free or self._max_idle_seqs == 0 or len(tokens) > self._room:
            return None
        if len(self._idle) >= self._max_idle_seqs or self.idle_tokens + len(tokens) > self._room:
            return None
        kv_seq = self._free.pop()
        self._idle[kv_seq] = list(tokens)
        return kv_seq

    def drop(self, kv_seq: int) -> list[KvTrim]:
        """Forget an idle sequence (e.g. one whose adopted KV failed to restore) and free its id."""
        if self._idle.pop(kv_seq, None) is None:
            return []
        self._free.append(kv_seq)
        return [KvTrim(kv_seq, 0)]

    def _take_id(self, ops: list[KvOp]) -> int:
        if self._free:
            return self._free.pop()
        victim, tokens = self._idle.popitem(last=False)
        ops.extend(self._drop_tail(victim, tokens, 0))
        return victim

    def _drop_tail(self, kv_seq: int, tokens: list[int], keep: int) -> list[KvOp]:
        """Forget positions >= `keep` of `kv_seq`, saving its state to the host tier first if what is
        lost is worth it."""
        trim = KvTrim(kv_seq, keep)
        if self._spill_min and len(tokens) - keep >= self._spill_min:
            return [KvSave(kv_seq, tuple(tokens)), trim]
        return [trim]

    def release(self, kv_seq: int, tokens: list[int], reusable: bool) -> list[KvOp]:
        """A sequence finished: keep its KV for reuse (if `reusable`), evicting LRU beyond the limits."""
        if not reusable or not tokens:
            self._free.append(kv_seq)
            return [KvTrim(kv_seq, 0)]
        if self._max_idle_seqs == 0 or len(tokens) > self._room:
            self._free.append(kv_seq)
            return self._drop_tail(kv_seq, tokens, 0)
        self._idle[kv_seq] = tokens
        return self._evict_beyond_room()

    def set_room(self, unneeded_tokens: int) -> list[KvOp]:
        """Idle prefixes may also hold `unneeded_tokens` of KV: what no running sequence can come to
        need (never less than `max_tokens`, the KV set aside for them). LRU ones beyond it leave now."""
        if self._max_tokens == 0:
            return []
        self._room = max(self._max_tokens, unneeded_tokens)
        return self._evict_beyond_room()

    def _evict_beyond_room(self) -> list[KvOp]:
        ops: list[KvOp] = []
        while len(self._idle) > self._max_idle_seqs or self.idle_tokens > self._room:
            victim, victim_tokens = self._idle.popitem(last=False)
            ops.extend(self._drop_tail(victim, victim_tokens, 0))
            self._free.append(victim)
        return ops
