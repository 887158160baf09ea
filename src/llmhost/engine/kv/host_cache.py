"""The second cache tier: KV states of sequences that left the llama.cpp context, kept in host RAM.

When the KV a free slot (KV stream) holds is evicted to make room, or trimmed because a request took
the slot for a shorter prefix of it, its state (`llama_state_seq_get_data`) is stored here, indexed by
its tokens. A later prompt sharing a longer prefix with a stored state than with anything still in the
context has that state restored into its sequence (`llama_state_seq_set_data`) and prefills only the
rest. A state of sliding-window layers at their window is stored with its sequence's SWA checkpoints
(as llama-server's prompt cache keeps its context checkpoints): a prompt sharing less of it than the
window's cells still hold is served from the newest checkpoint within what it shares.

Pure bookkeeping of bytes and token lists: the engine moves states in and out of llama.cpp. Entries
are LRU within a byte budget; a state is only ever served under the `StateKey` it was saved with
(model, adapters, KV layout), since llama.cpp checks shapes, not meaning.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import psutil

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.prefix_cache import common_prefix_len, reusable
from llmhost.engine.kv.swa_checkpoints import Checkpoint

log = logging.getLogger(__name__)

# a state must spare at least this many prompt tokens of prefill to be stored or restored: below it,
# moving the whole state costs more than it saves
MIN_GAIN_TOKENS = 16
# the default budget when none is set: this share of the memory available at start, at most the cap
AUTO_SHARE = 0.25
AUTO_CAP_MB = 8192


@dataclass(slots=True, frozen=True)
class StateKey:
    """What a saved state is only valid for: a state restored under another key is garbage KV."""

    model: str  # the weights: path, size and description of the GGUF
    adapters: str = ""  # LoRA adapters applied with their scales ("": none)
    kv: str = ""  # KV layout: cache types, V transposed or not (flash attention), SWA handling


@dataclass(slots=True, eq=False)
class _Entry:
    key: StateKey
    tokens: list[int]
    data: bytes
    floor: int = 0  # the shortest prefix of it that can be restored (the sequence's KV floor when saved)
    # the sequence's SWA checkpoints below its floor, oldest first: prefixes they serve too
    checkpoints: tuple[Checkpoint, ...] = ()

    @property
    def nbytes(self) -> int:
        return len(self.data) + sum(len(cp.data) for cp in self.checkpoints)

    def usable(self, n: int) -> tuple[int, Checkpoint | None]:
        """Of its first `n` positions, the longest prefix that can be restored, with the checkpoint
        restoring its sliding-window cells (None: the state's own); 0 where none can."""
        if n >= self.floor:
            return n, None
        for cp in reversed(self.checkpoints):
            if cp.n_tokens <= n:
                return cp.n_tokens, cp
        return 0, None


@dataclass(slots=True, frozen=True)
class HostMatch:
    """A stored state serving a prompt's first `n_tokens` tokens, with the SWA checkpoint that restores
    its sliding-window cells where the state's own are past them (`checkpoint`)."""

    entry: _Entry
    n_tokens: int
    checkpoint: Checkpoint | None = None

    @property
    def n_state_tokens(self) -> int:
        return len(self.entry.tokens)


def auto_budget_mb(available_bytes: int) -> int:
    """The budget when none is configured: a share of the memory available now, capped."""
    return max(0, min(AUTO_CAP_MB, int(available_bytes * AUTO_SHARE) // 2**20))


def host_cache(config: EngineConfig, reserved_bytes: int = 0) -> HostCache | None:
    """The host-memory cache tier `config` asks for (None: off), its budget logged. `reserved_bytes`:
    what `config.memory_mb` keeps beside the process as it is now (the model's weights, counted whole,
    the SWA checkpoints' budget, and a projector's encoder and media embeddings cache, not yet touched)."""
    mb = config.prompt_cache_mb
    if mb == -1:
        mb = _auto_mb(config.memory_mb, reserved_bytes)
    elif mb:
        log.info("prompt cache (host memory tier): %d MiB", mb)
    return HostCache(mb * 2**20) if mb > 0 else None


def _auto_mb(memory_mb: int, reserved_bytes: int) -> int:
    """The automatic budget: a share of the memory available now, and at most what `memory_mb` leaves
    (several endpoint copies on one host each saw the same free memory: their shares over-committed it)."""
    available = psutil.virtual_memory().available
    mb = auto_budget_mb(available)
    why = f"sized from {available // 2**20} MiB available"
    if memory_mb:
        # the process as it is now (libraries, the KV cache allocated and cleared) plus the weights counted
        # whole, although mmap pages them in as they are used, and the SWA checkpoints' budget: an upper
        # bound of all but the cache
        used_mb = (psutil.Process().memory_info().rss + reserved_bytes) // 2**20
        room = max(0, memory_mb - used_mb)
        if room < mb:
            mb, why = (
                room,
                (
                    f"what --memory-mb {memory_mb} leaves beside {used_mb} MiB (weights, KV, SWA "
                    "checkpoints, process)"
                ),
            )
    log.info(
        "prompt cache (host memory tier): %d MiB, %s (--prompt-cache-mb sets it, 0 turns it off)", mb, why
    )
    return mb


class HostCache:
    """Saved sequence states by token prefix, LRU within `budget_bytes`."""

    def __init__(self, budget_bytes: int, min_tokens: int = MIN_GAIN_TOKENS) -> None:
        if budget_bytes < 0 or min_tokens < 1:
            raise ValueError(f"need budget_bytes >= 0 and min_tokens >= 1, got {budget_bytes}, {min_tokens}")
        self.budget_bytes = budget_bytes
        self.min_tokens = min_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # id(entry) -> entry, LRU first
        self.bytes = 0
        self.stores = 0
        self.hits = 0
        self.restored_tokens = 0
        self.evictions = 0
        self.restore_failures = 0

    def __len__(self) -> int:
        return len(self._entries)

    def figures(self) -> dict[str, int]:
        """Its counters and sizes, named as the engine's stats name them."""
        return {
            "prompt_cache_hits": self.hits,
            "prompt_cache_restored_tokens": self.restored_tokens,
            "prompt_cache_stores": self.stores,
            "prompt_cache_evictions": self.evictions,
            "prompt_cache_restore_failures": self.restore_failures,
            "prompt_cache_entries": len(self),
            "prompt_cache_bytes": self.bytes,
            "prompt_cache_capacity_bytes": self.budget_bytes,
        }

    # -- serving a prompt ------------------------------------------------------------------------------
    def lookup(self, key: StateKey, prompt: list[int]) -> HostMatch | None:
        """The stored state serving the longest prefix of `prompt` (at least `min_tokens`): all it
        shares where that reaches the state's floor once the prompt's last token, always decoded, is
        left out, else its newest SWA checkpoint within that; or None.

        A check only: nothing is counted and the LRU order is untouched."""
        best: HostMatch | None = None
        for entry in self._entries.values():
            if entry.key != key:
                continue
            shared = common_prefix_len(prompt, entry.tokens)
            n, checkpoint = entry.usable(reusable(shared, prompt))
            if checkpoint is None and n:
                n = shared  # the prompt's last token is left out by the caller
            if n >= self.min_tokens and (best is None or n > best.n_tokens):
                best = HostMatch(entry, n, checkpoint)
        return best

    def restore(self, match: HostMatch, keep: int) -> bytes:
        """The state of a match to load into a sequence, which keeps its first `keep` (<= n_tokens)
        positions; counted as a hit and made most recently used. The entry stays: other prompts may
        share it too."""
        if not 0 < keep <= match.n_tokens:
            raise ValueError(f"keep must be in 1..{match.n_tokens}, got {keep}")
        entry = match.entry
        if self._entries.get(id(entry)) is entry:
            self._entries.move_to_end(id(entry))
        self.hits += 1
        self.restored_tokens += keep
        return entry.data

    def refused(self) -> None:
        """llama.cpp refused a restored state (e.g. no room in the context); its hit is `uncount`ed too."""
        self.restore_failures += 1

    def uncount(self, keep: int) -> None:
        """A restored prefix of `keep` tokens was not in the context after all: it is prefilled instead."""
        self.hits -= 1
        self.restored_tokens -= keep

    # -- keeping a state -------------------------------------------------------------------------------
    def can_store(
        self,
        key: StateKey,
        tokens: list[int],
        n_bytes: int,
        floor: int = 0,
        checkpoints: tuple[Checkpoint, ...] = (),
    ) -> bool:
        """Whether a state of `tokens` taking `n_bytes` (its checkpoints' besides), whose prefixes from
        `floor` tokens on and at its `checkpoints` can be restored, would be kept: long enough to
        matter, within the budget, and not already held (a stored state of the same key starting with
        `tokens` and serving every prefix it serves)."""
        candidate = _Entry(key, list(tokens), b"", floor, _below(checkpoints, floor))
        total = n_bytes + sum(len(cp.data) for cp in candidate.checkpoints)
        if len(tokens) < max(self.min_tokens, floor) or total > self.budget_bytes:
            return False
        return not any(_covers(e, candidate) for e in self._entries.values())

    def store(
        self,
        key: StateKey,
        tokens: list[int],
        data: bytes,
        floor: int = 0,
        checkpoints: tuple[Checkpoint, ...] = (),
    ) -> None:
        """Keep a state and the SWA checkpoints below its floor: entries it covers are dropped (it
        serves every prompt they served), then the least recently used go until the budget holds."""
        if not self.can_store(key, tokens, len(data), floor, checkpoints):
            raise ValueError("store() of a state can_store() refuses")
        entry = _Entry(key, list(tokens), data, floor, _below(checkpoints, floor))
        for entry_id, old in list(self._entries.items()):
            if _covers(entry, old):
                self._remove(entry_id)
        self._entries[id(entry)] = entry
        self.bytes += entry.nbytes
        self.stores += 1
        while self.bytes > self.budget_bytes:
            self._remove(next(iter(self._entries)))
            self.evictions += 1

    def _remove(self, entry_id: int) -> None:
        entry = self._entries.pop(entry_id)
        self.bytes -= entry.nbytes


def _below(checkpoints: tuple[Checkpoint, ...], floor: int) -> tuple[Checkpoint, ...]:
    """The checkpoints that serve a prefix the state alone does not (those at or past its floor add
    nothing), oldest first."""
    return tuple(sorted((cp for cp in checkpoints if cp.n_tokens < floor), key=lambda cp: cp.n_tokens))


def _covers(entry: _Entry, other: _Entry) -> bool:
    """Whether `entry` serves every prompt `other` would serve: the same key, `other`'s tokens a
    prefix of its own, and every prefix length `other` restores restored as well."""
    if entry.key != other.key or not _starts_with(entry.tokens, other.tokens) or entry.floor > other.floor:
        return False
    positions = {cp.n_tokens for cp in entry.checkpoints}
    return all(cp.n_tokens >= entry.floor or cp.n_tokens in positions for cp in other.checkpoints)


def _starts_with(tokens: list[int], prefix: list[int]) -> bool:
    return len(tokens) >= len(prefix) and tokens[: len(prefix)] == prefix
