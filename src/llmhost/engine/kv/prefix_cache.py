"""Which llama.cpp sequence ids are free, running or idle holding reusable KV.

Pure bookkeeping: it returns the KV operations to perform; the runner performs them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from llmhost.engine.lora import AdapterSet


@dataclass(slots=True, frozen=True)
class KvCopy:
    """Give `dst` (empty) the first `n_tokens` of `src`'s KV: each sequence has a KV stream of its own,
    so this copies the cells (llama_memory_seq_cp of the whole stream, then a trim)."""

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
    adapters: AdapterSet = ()  # the LoRA adapter set the KV was computed with


@dataclass(slots=True, frozen=True)
class KvRestore:
    """Load a state saved in host memory into `seq` (empty), keeping its first `keep` positions."""

    seq: int
    keep: int
    data: bytes = field(repr=False)
    n_state_tokens: int = 0  # positions the state holds (>= keep)


@dataclass(slots=True, frozen=True)
class KvMove:
    """Move a running sequence's first `n_tokens` positions from `src` to the free id `dst`, leaving
    `src` empty: a copy of the stream, then a trim of the source."""

    src: int
    dst: int
    n_tokens: int


# what llama.cpp performs on the context
KvEdit = KvCopy | KvTrim | KvMove
# what a step plans: edits, and states moved between the context and host memory
KvOp = KvCopy | KvTrim | KvSave | KvRestore | KvMove


def kv_ids(op: KvOp) -> tuple[int, ...]:
    """The sequence ids an operation reads or writes."""
    if isinstance(op, KvCopy | KvMove):
        return (op.src, op.dst)
    return (op.seq,)


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
    """Which llama.cpp sequence ids run, and which idle ones keep finished requests' KV for reuse.

    Every id has a KV stream of its own (llama.cpp's non-unified cache: attention reads only the
    sequence's own cells, not every sequence's). Running sequences take ids 0..n_slots-1, lowest free
    first, so a step's batch has consecutive ids: llama.cpp splits a batch of streams wherever they
    are not. A finished sequence's KV is copied to an idle id (n_slots and up), replacing the idle
    entry it extends (its conversation's previous turn), else a free one, else the least recently
    used one; a new prompt's prefix is copied from the idle or running sequence holding the longest.
    KV computed under one LoRA adapter set serves only prompts of that set (callers pass the running
    sequences of the prompt's set; idle entries remember theirs).
    """

    def __init__(
        self,
        n_slots: int,
        max_idle_seqs: int,
        spill_min_tokens: int = 0,
        reach: Callable[[int, int], int] | None = None,
    ) -> None:
        """`spill_min_tokens` > 0: KV of at least that many tokens about to be dropped is first saved
        (`KvSave`) to the host cache tier. `reach(kv_seq, n)`: the longest prefix of a sequence's first
        n positions that can be reused (a long sequence may have lost its first sliding-window cells:
        a shorter prefix, the newest SWA checkpoint within them, or none); None: every prefix."""
        self._free: list[int] = list(range(n_slots))
        self._free_idle: list[int] = list(range(n_slots + max_idle_seqs - 1, n_slots - 1, -1))
        self._idle: OrderedDict[int, list[int]] = OrderedDict()
        self._idle_adapters: dict[int, AdapterSet] = {}  # of each idle id, set when it is filled
        self._max_idle = max_idle_seqs
        self._spill_min = spill_min_tokens
        self._reach = reach
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
        return bool(self._free)

    def best_match(
        self, prompt: list[int], running: Iterable[tuple[int, list[int]]], adapters: AdapterSet = ()
    ) -> tuple[int, int, bool]:
        """(kv_seq, tokens shared, is_idle) of the longest prefix among idle sequences of `adapters`
        and `running` ones whose KV can serve it."""
        best = (-1, 0, False)
        for seq_id, tokens in self._idle.items():
            if self._idle_adapters.get(seq_id, ()) != adapters:
                continue
            n = self._served(seq_id, common_prefix_len(prompt, tokens), prompt)
            if n > best[1]:
                best = (seq_id, n, True)
        for seq_id, tokens in running:
            n = self._served(seq_id, common_prefix_len(prompt, tokens), prompt)
            if n > best[1]:
                best = (seq_id, n, False)
        return best

    def _served(self, kv_seq: int, shared: int, prompt: list[int]) -> int:
        """Of `shared` leading tokens `kv_seq` holds of `prompt`, those a copy can serve (all but the
        prompt's last at most; fewer where its sliding-window cells moved on)."""
        if shared <= 0 or self._reach is None:
            return shared
        n = reusable(shared, prompt)
        return shared if n <= 0 else self._reach(kv_seq, n)

    def _serves(self, kv_seq: int, n_reused: int) -> bool:
        """Whether a prompt can take `kv_seq`'s first `n_reused` positions as they are."""
        return self._reach is None or self._reach(kv_seq, n_reused) == n_reused

    def reuse_lost(self, n_tokens: int) -> None:
        """A prefix counted as reused was not in the context after all: it is prefilled instead."""
        self.hits -= 1
        self.reused_tokens -= n_tokens

    def acquire(
        self,
        prompt: list[int],
        running: Iterable[tuple[int, list[int]]],
        reuse: bool = True,
        adapters: AdapterSet = (),
    ) -> PrefixMatch:
        """Give a new request the lowest free running id, with a copy of the longest cached prefix of
        its prompt (unless `reuse` is off: the request needs the logits of every prompt position)."""
        if not self._free:
            raise RuntimeError("no KV sequence id available")
        self.lookups += 1
        src, shared, is_idle = self.best_match(prompt, list(running), adapters)
        shared = reusable(shared, prompt) if reuse else 0
        dst = min(self._free)
        self._free.remove(dst)
        if shared <= 0:
            return PrefixMatch(dst, 0, ())
        self.hits += 1
        self.reused_tokens += shared
        if is_idle:
            self._idle.move_to_end(src)
        return PrefixMatch(dst, shared, (KvCopy(src, dst, shared),))

    def relocation(self, running: Iterable[int]) -> tuple[int, int] | None:
        """(highest running id, lowest free id) while a free id lies below a running one. llama.cpp
        decodes streams in one micro-batch only where their ids run consecutively, and every micro-batch
        of a decode step is a pass over the weights: with a gap, 4 sequences decode in 59 ms instead of
        38, 7 in 88 instead of 70 (2 cores, the default model, `benchmarks/conversations.py` at 12
        users, where a gap was open in 28% of the steps)."""
        ids = list(running)
        if not ids or not self._free:
            return None
        top, low = max(ids), min(self._free)
        return (top, low) if low < top else None

    def relocate(self, src: int, dst: int, n_tokens: int) -> KvMove:
        """Move the running sequence at `src` (holding `n_tokens` positions) to the free id `dst`."""
        self._free.remove(dst)
        self._free.append(src)
        return KvMove(src, dst, n_tokens)

    def adopt(self, tokens: list[int]) -> int | None:
        """Take a free idle id and register it as holding `tokens` (KV restored by the caller).

        None when nothing can be kept: no idle id free (or idle caching off)."""
        if not tokens or not self._free_idle:
            return None
        kv_seq = self._free_idle.pop()
        self._idle[kv_seq] = list(tokens)
        self._idle_adapters[kv_seq] = ()
        return kv_seq

    def drop(self, kv_seq: int) -> list[KvTrim]:
        """Forget an idle sequence (e.g. one whose adopted KV failed to restore) and free its id."""
        if self._idle.pop(kv_seq, None) is None:
            return []
        self._free_idle.append(kv_seq)
        return [KvTrim(kv_seq, 0)]

    def release(
        self, kv_seq: int, tokens: list[int], reusable: bool, adapters: AdapterSet = ()
    ) -> list[KvOp]:
        """A sequence finished: its id is free again, its KV (computed with `adapters`) kept in an
        idle id (if `reusable`)."""
        self._free.append(kv_seq)
        if not reusable or not tokens:
            return [KvTrim(kv_seq, 0)]
        covering = self._covering(tokens, adapters)
        if covering is not None:  # an idle sequence already holds all of it (and more)
            self._idle.move_to_end(covering)
            return [KvTrim(kv_seq, 0)]
        if self._max_idle == 0:  # idle caching off: only the host tier may keep it
            return self._drop(kv_seq, tokens, adapters)
        ops: list[KvOp] = []
        idle_id = self._idle_id_for(tokens, adapters, ops)
        self._idle[idle_id] = tokens
        self._idle_adapters[idle_id] = adapters
        return [*ops, KvCopy(kv_seq, idle_id, len(tokens)), KvTrim(kv_seq, 0)]

    def _covering(self, tokens: list[int], adapters: AdapterSet) -> int | None:
        """An idle sequence of `adapters` whose KV starts with all of `tokens` and serves them."""
        for seq_id, held in self._idle.items():
            same_set = self._idle_adapters.get(seq_id, ()) == adapters
            if same_set and held[: len(tokens)] == tokens and self._serves(seq_id, len(tokens) - 1):
                return seq_id
        return None

    def _idle_id_for(self, tokens: list[int], adapters: AdapterSet, ops: list[KvOp]) -> int:
        """The idle id to keep `tokens` in: the entry they extend (their previous turn), else a free
        one, else the least recently used (dropped, saved to host memory first if worth it)."""
        for seq_id, held in self._idle.items():
            if self._idle_adapters.get(seq_id, ()) == adapters and tokens[: len(held)] == held:
                del self._idle[seq_id]
                return seq_id
        if self._free_idle:
            return self._free_idle.pop()
        victim, victim_tokens = self._idle.popitem(last=False)
        ops.extend(self._drop(victim, victim_tokens, self._idle_adapters.get(victim, ())))
        return victim

    def _drop(self, kv_seq: int, tokens: list[int], adapters: AdapterSet) -> list[KvOp]:
        """Forget `kv_seq`'s KV, saving its state to the host tier first if it is worth it."""
        if self._spill_min and len(tokens) >= self._spill_min:
            return [KvSave(kv_seq, tuple(tokens), adapters), KvTrim(kv_seq, 0)]
        return [KvTrim(kv_seq, 0)]
