"""Saved states of sliding-window layers at prompt positions (llama-server's context checkpoints).

With sliding-window layers at their window (llama.cpp's default), a sequence's SWA cells hold only its
last positions: a prompt sharing a shorter prefix of it cannot be served by truncating it (the cells
its next token attends to are gone). While a prompt is prefilled, the SWA-only state of its sequence is
saved at chunk starts (`llama_state_seq_get_data_ext(..., LLAMA_STATE_SEQ_FLAGS_SWA_ONLY)`); a later
prompt sharing n tokens takes the full-attention layers' first c positions and the SWA cells of the
newest checkpoint at c <= n. Pure bookkeeping: the model saves and loads the bytes, and mirrors every KV
edit here (`follow`), so a sequence's checkpoints always describe its own KV."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.prefix_cache import KvCopy, KvEdit, KvMove, KvTrim


@dataclass(slots=True, frozen=True)
class Checkpoint:
    """The SWA cells of a sequence holding its first `n_tokens` positions; `serial`: the order made."""

    n_tokens: int
    data: bytes = field(repr=False)
    serial: int = 0


@dataclass(slots=True, frozen=True)
class CheckpointPolicy:
    """`per_seq`: most checkpoints a sequence keeps (0: none made); `spacing`: fewest positions between
    two; `live`: positions past a checkpoint that the SWA cells still hold after a prefill (the cache's
    cells beyond the window): a checkpoint that close to the prompt's end is not needed to serve it;
    `budget`: most bytes the checkpoints of every sequence hold together (None: no bound)."""

    per_seq: int
    spacing: int
    live: int
    budget: int | None = None

    def __post_init__(self) -> None:
        if self.per_seq < 0 or self.spacing < 1 or self.live < 0 or (self.budget or 0) < 0:
            raise ValueError(f"bad checkpoint policy {self}")

    @classmethod
    def of(cls, config: EngineConfig, windowed: bool, budget: int | None = None) -> CheckpointPolicy:
        """`config`'s: at most one a prefill chunk, none within a micro-batch of the prompt's end (a
        stream keeps at least that many cells past the window); none unless `windowed`."""
        n = config.swa_checkpoints if windowed else 0
        return cls(n, spacing=config.max_batch_tokens, live=config.llama_n_ubatch, budget=budget)

    def most_cells(self, max_prompt: int, window: int) -> int:
        """The most sliding-window cells one sequence's checkpoints hold: each at most the window or its
        position, the last before `max_prompt` - `live`, the others `spacing` apart."""
        last = max_prompt - self.live - 1
        positions = (last - k * self.spacing for k in range(self.per_seq))
        return sum(min(window, p) for p in positions if p > 0)


class SwaCheckpoints:
    """The checkpoints of every KV sequence, oldest first. A sequence keeps its first `per_seq`: the
    early positions (a system prompt, the first turns) are those other prompts share. Past the policy's
    byte budget the checkpoints made first go (those of the sequences prefilled longest ago)."""

    def __init__(self, policy: CheckpointPolicy) -> None:
        self.policy = policy
        self._by_seq: dict[int, list[Checkpoint]] = {}
        self.made = 0
        self.restored = 0
        self.dropped = 0  # for the budget

    def wants(self, kv_seq: int, n_tokens: int, prompt_len: int) -> bool:
        """Whether to save `kv_seq`'s SWA cells now that it holds `n_tokens` of a `prompt_len` prompt:
        room left, far enough from the last one, and far enough from the prompt's end that the cells
        of `n_tokens` will be gone when the prompt is done."""
        p = self.policy
        held = self._by_seq.get(kv_seq, [])
        if n_tokens <= 0 or len(held) >= p.per_seq or n_tokens + p.live >= prompt_len:
            return False
        return not held or n_tokens >= held[-1].n_tokens + p.spacing

    def add(self, kv_seq: int, n_tokens: int, data: bytes) -> bool:
        """Keep `data` as `kv_seq`'s checkpoint at `n_tokens`, the oldest checkpoints dropped until the
        budget holds it; False (nothing kept) where it alone exceeds the budget."""
        budget = self.policy.budget
        if budget is not None:
            if len(data) > budget:
                return False
            while self.nbytes + len(data) > budget:
                self._drop_oldest()
        self.made += 1
        self._by_seq.setdefault(kv_seq, []).append(Checkpoint(n_tokens, data, self.made))
        return True

    def _drop_oldest(self) -> None:
        """Drop the checkpoint made first, from every sequence sharing it."""
        oldest = min(cp.serial for held in self._by_seq.values() for cp in held)
        for kv_seq, held in list(self._by_seq.items()):
            self._set(kv_seq, [cp for cp in held if cp.serial != oldest])
        self.dropped += 1

    def newest_at_or_before(self, kv_seq: int, n_tokens: int) -> Checkpoint | None:
        """The checkpoint of `kv_seq` covering the most of a prefix of `n_tokens` positions."""
        for cp in reversed(self._by_seq.get(kv_seq, [])):
            if cp.n_tokens <= n_tokens:
                return cp
        return None

    def at(self, kv_seq: int, n_tokens: int) -> Checkpoint | None:
        cp = self.newest_at_or_before(kv_seq, n_tokens)
        return cp if cp is not None and cp.n_tokens == n_tokens else None

    def follow(self, op: KvEdit) -> None:
        """Mirror a KV edit: a copy gives the target the source's checkpoints within the copied prefix
        (the bytes are shared, not copied), a trim forgets those past what is kept."""
        if isinstance(op, KvMove):
            self.follow(KvCopy(op.src, op.dst, op.n_tokens))
            self.follow(KvTrim(op.src, 0))
        elif isinstance(op, KvCopy):
            kept = [cp for cp in self._by_seq.get(op.src, []) if cp.n_tokens <= op.n_tokens]
            self._set(op.dst, kept)
        else:
            kept = [cp for cp in self._by_seq.get(op.seq, []) if cp.n_tokens <= op.keep]
            self._set(op.seq, kept)

    def _set(self, kv_seq: int, held: list[Checkpoint]) -> None:
        if held:
            self._by_seq[kv_seq] = held
        else:
            self._by_seq.pop(kv_seq, None)

    def forget(self, kv_seq: int | None = None) -> None:
        """Drop one sequence's checkpoints (its KV replaced by a loaded state), or every one's."""
        if kv_seq is None:
            self._by_seq.clear()
        else:
            self._by_seq.pop(kv_seq, None)

    def count(self, kv_seq: int) -> int:
        return len(self._by_seq.get(kv_seq, []))

    def held(self, kv_seq: int) -> tuple[Checkpoint, ...]:
        """`kv_seq`'s checkpoints, oldest first (saved with its state when it leaves the context)."""
        return tuple(self._by_seq.get(kv_seq, []))

    @property
    def nbytes(self) -> int:
        """Host bytes the checkpoints hold, each counted once however many sequences share it."""
        unique = {id(cp.data): len(cp.data) for held in self._by_seq.values() for cp in held}
        return sum(unique.values())
