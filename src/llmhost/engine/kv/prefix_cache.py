"""Which llama.cpp sequence ids (KV streams, "slots") run, and which prefix each free one still holds.

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
class KvKeep:
    """A request takes the free slot `seq` as it is, keeping its first `keep` positions (a trim, then a
    check that they still hold what the next token attends to: sliding-window cells may have moved on)."""

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
    # the sliding-window cells at `keep` (an SWA checkpoint saved with the state) where the state's own
    # window moved past them; empty: the state's own serve
    swa: bytes = field(default=b"", repr=False)


@dataclass(slots=True, frozen=True)
class KvMove:
    """Move a running sequence's first `n_tokens` positions from `src` to the free id `dst`, leaving
    `src` empty: a copy of the stream, then a trim of the source."""

    src: int
    dst: int
    n_tokens: int


# what llama.cpp performs on the context
KvEdit = KvCopy | KvTrim | KvMove
# what a step plans: edits, a slot taken in place, and states moved between the context and host memory
KvOp = KvCopy | KvTrim | KvKeep | KvSave | KvRestore | KvMove


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


# held tokens a prompt may drop by taking a free slot in place: a conversation's next turn drops at most
# the few closing tokens of the last answer that its template renders again differently
IN_PLACE_MAX_LOSS = 32


@dataclass(slots=True, frozen=True)
class PrefixMatch:
    kv_seq: int  # the sequence id the new request gets
    n_reused: int  # prompt tokens already in its KV
    ops: tuple[KvOp, ...]


class PrefixCache:
    """Which llama.cpp sequence ids ("slots") run, and which prefix each free slot still holds.

    Every id has a KV stream of its own (llama.cpp's non-unified cache: attention reads only the
    sequence's own cells, not every sequence's). A finished request's KV stays in its slot, as
    llama-server's does, so no stream is reserved for idle KV: a new request takes the free slot whose
    KV shares the longest prefix with its prompt, in place (the rest trimmed); where a running sequence
    holds a longer one, it is copied into an empty free slot, else into the least recently used one.
    A slot's KV that is about to be lost is saved to the host-memory tier first when it is worth it.
    Running sequences are kept at the lowest ids (`relocation`). KV computed under one LoRA adapter set
    serves only prompts of that set (callers pass the running sequences of the prompt's set; free
    slots remember theirs).
    """

    def __init__(
        self,
        n_running: int,
        n_extra: int = 0,
        spill_min_tokens: int = 0,
        reach: Callable[[int, int], int] | None = None,
    ) -> None:
        """At most `n_running` slots run at once; `n_extra` more slots only ever hold finished
        requests' KV (`--prefix-cache-seqs`). `spill_min_tokens` > 0: KV of at least that many
        tokens about to be lost is first saved (`KvSave`) to the host cache tier. `reach(kv_seq, n)`:
        the longest prefix of a sequence's first n positions that can be reused (a long sequence may
        have lost its first sliding-window cells: a shorter prefix, the newest SWA checkpoint within
        them, or none); None: every prefix."""
        self._n_running = n_running
        self._free: list[int] = list(range(n_running + n_extra))
        self._n_taken = 0
        # free slots whose KV holds a finished request's tokens, least recently used first
        self._held: OrderedDict[int, list[int]] = OrderedDict()
        self._held_adapters: dict[int, AdapterSet] = {}  # of each held slot, set when it is released
        self._spill_min = spill_min_tokens
        self._reach = reach
        self.lookups = 0
        self.hits = 0
        self.reused_tokens = 0

    @property
    def held_tokens(self) -> int:
        """Tokens of KV the free slots hold."""
        return sum(len(t) for t in self._held.values())

    @property
    def held_seqs(self) -> int:
        return len(self._held)

    def can_acquire(self) -> bool:
        return bool(self._free) and self._n_taken < self._n_running

    def best_match(
        self, prompt: list[int], running: Iterable[tuple[int, list[int]]], adapters: AdapterSet = ()
    ) -> tuple[int, int, bool]:
        """(kv_seq, tokens shared, is_free) of the longest prefix among free slots holding KV of
        `adapters` and `running` sequences whose KV can serve it."""
        best = (-1, 0, False)
        for seq_id, tokens in self._held.items():
            if self._held_adapters.get(seq_id, ()) != adapters:
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
        """Of `shared` leading tokens `kv_seq` holds of `prompt`, those it can serve (all but the
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
        """Give a new request a free slot holding the longest cached prefix of its prompt: taken in
        place where a free slot holds it, else copied in from the running sequence holding it (unless
        `reuse` is off: the request needs the logits of every prompt position)."""
        if not self.can_acquire():
            raise RuntimeError("no KV sequence id available")
        self.lookups += 1
        src, shared, in_free_slot = (
            self.best_match(prompt, list(running), adapters) if reuse else (-1, 0, False)
        )
        n_reused = reusable(shared, prompt)
        ops: list[KvOp] = []
        if n_reused > 0 and in_free_slot and self._in_place(src, n_reused):
            dst = src
            ops.extend(self._take_in_place(dst, n_reused))
        else:
            dst = self._take_free(ops, avoid=src if n_reused > 0 and in_free_slot else None)
            if n_reused > 0:
                ops.append(KvCopy(src, dst, n_reused))
        if n_reused > 0:
            self.hits += 1
            self.reused_tokens += n_reused
        return PrefixMatch(dst, max(n_reused, 0), tuple(ops))

    def _in_place(self, slot: int, keep: int) -> bool:
        """Whether a prompt sharing `keep` tokens with the free `slot` takes that slot itself rather than
        a copy of them in an empty slot: when it loses little of what the slot holds (a conversation's
        next turn), or no slot is empty."""
        lost = len(self._held[slot]) - keep
        return lost < IN_PLACE_MAX_LOSS or all(i in self._held for i in self._free)

    def _take_in_place(self, slot: int, keep: int) -> list[KvOp]:
        """Take the free `slot` with its first `keep` positions; what it held beyond them is saved to
        the host tier first where that much is worth keeping (another user's conversation after a
        shared system prompt)."""
        tokens = self._held.pop(slot)
        adapters = self._held_adapters.pop(slot, ())
        self._free.remove(slot)
        self._n_taken += 1
        ops: list[KvOp] = []
        if self._spill_min and len(tokens) - keep >= self._spill_min:
            ops.append(KvSave(slot, tuple(tokens), adapters))
        return [*ops, KvKeep(slot, keep)]

    def _take_free(self, ops: list[KvOp], avoid: int | None = None) -> int:
        """Take a free slot that keeps the running ids consecutive (a gap costs a move, see
        `relocation`): of those leaving the fewest gaps, an empty one (the lowest), else the least
        recently used (its KV evicted); never `avoid`, the free slot a prefix is about to be copied from
        (evicting it would empty the source)."""
        taken = set(range(len(self._free) + self._n_taken)) - set(self._free)
        recency = {slot: i for i, slot in enumerate(self._held)}

        def cost(slot: int) -> tuple[int, int, int]:
            ids = taken | {slot}
            gaps = max(ids) - min(ids) + 1 - len(ids)
            return (gaps, 0, slot) if slot not in self._held else (gaps, 1, recency[slot])

        slot = min((i for i in self._free if i != avoid), key=cost)
        ops.extend(self._evict(slot))
        self._free.remove(slot)
        self._n_taken += 1
        return slot

    def _evict(self, slot: int) -> list[KvOp]:
        """Forget what the free `slot` holds, saving its state to the host tier first if worth it."""
        tokens = self._held.pop(slot, None)
        adapters = self._held_adapters.pop(slot, ())
        if tokens is None:
            return []
        if self._spill_min and len(tokens) >= self._spill_min:
            return [KvSave(slot, tuple(tokens), adapters), KvTrim(slot, 0)]
        return [KvTrim(slot, 0)]

    def relocation(self, running: Iterable[int]) -> tuple[int, int] | None:
        """(running id, free id) to move it to while the running ids do not form one consecutive run.
        llama.cpp decodes streams in one micro-batch only where their ids run consecutively, and every
        micro-batch of a decode step is a pass over the weights: with a gap, 4 sequences decode in 59 ms
        instead of 38, 7 in 88 instead of 70 (2 cores, the default model, `benchmarks/conversations.py`
        at 12 users, where a gap was open in 28% of the steps). The run they are gathered into is the
        one already holding most of them, then the one whose free slots hold the least KV to evict;
        the free slot filled is an empty one, else the least recently used."""
        ids = sorted(running)
        k = len(ids)
        if k < 2 or ids[-1] - ids[0] + 1 == k:
            return None
        n_slots = len(self._free) + self._n_taken
        taken = set(ids)

        def rank(start: int) -> tuple[int, int, int]:
            window = range(start, start + k)
            return (sum(i in taken for i in window), -sum(i in self._held for i in window), -start)

        start = max(range(n_slots - k + 1), key=rank)
        window = range(start, start + k)
        src = next(i for i in reversed(ids) if i not in window)
        free = [i for i in window if i in self._free]
        empty = [i for i in free if i not in self._held]
        dst = empty[0] if empty else min(free, key=list(self._held).index)
        return src, dst

    def relocate(self, src: int, dst: int, n_tokens: int) -> list[KvOp]:
        """Move the running sequence at `src` (holding `n_tokens` positions) to the free slot `dst`,
        whose own KV is evicted (saved to the host tier first if worth it)."""
        ops = self._evict(dst)
        self._free.remove(dst)
        self._free.append(src)
        return [*ops, KvMove(src, dst, n_tokens)]

    def adopt(self, tokens: list[int]) -> int | None:
        """Take an empty free slot and register it as holding `tokens` (KV restored by the caller).

        None when nothing can be kept: no free slot is empty."""
        empty = [i for i in self._free if i not in self._held]
        if not tokens or not empty:
            return None
        slot = min(empty)
        self._held[slot] = list(tokens)
        self._held_adapters[slot] = ()
        return slot

    def drop(self, kv_seq: int) -> list[KvTrim]:
        """Forget what a free slot holds (e.g. adopted KV that failed to restore)."""
        if self._held.pop(kv_seq, None) is None:
            return []
        self._held_adapters.pop(kv_seq, None)
        return [KvTrim(kv_seq, 0)]

    def release(
        self, kv_seq: int, tokens: list[int], reusable: bool, adapters: AdapterSet = ()
    ) -> list[KvOp]:
        """A sequence finished: its slot is free again, holding its KV (computed with `adapters`) for a
        later prompt sharing a prefix (if `reusable`)."""
        self._free.append(kv_seq)
        self._n_taken -= 1
        if not reusable or not tokens:
            return [KvTrim(kv_seq, 0)]
        covering = self._covering(tokens, adapters)
        if covering is not None:  # another free slot already holds all of it (and more)
            self._held.move_to_end(covering)
            return [KvTrim(kv_seq, 0)]
        ops: list[KvOp] = []
        for slot, held in list(self._held.items()):  # its previous turn: superseded
            if self._held_adapters.get(slot, ()) == adapters and tokens[: len(held)] == held:
                ops.extend(self._evict_unsaved(slot))
        self._held[kv_seq] = list(tokens)
        self._held_adapters[kv_seq] = adapters
        return ops

    def _evict_unsaved(self, slot: int) -> list[KvOp]:
        """Forget a free slot's KV that another slot now holds in full: nothing to save."""
        self._held.pop(slot)
        self._held_adapters.pop(slot, None)
        return [KvTrim(slot, 0)]

    def _covering(self, tokens: list[int], adapters: AdapterSet) -> int | None:
        """A free slot of `adapters` whose KV starts with all of `tokens` and serves them."""
        for seq_id, held in self._held.items():
            same_set = self._held_adapters.get(seq_id, ()) == adapters
            if same_set and held[: len(tokens)] == tokens and self._serves(seq_id, len(tokens) - 1):
                return seq_id
        return None
