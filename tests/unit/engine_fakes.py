"""A stand-in for LlamaModel with no llama.cpp model: the next token after t is (t + 1) % CYCLE, so
every request's output is known in advance. Faults are switched on per test: a token that makes a
whole batched decode fail, a token whose logits cannot be read (sampling fails), a KV operation
that fails once, a decode that always fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from llmhost.engine import Engine, EngineConfig
from llmhost.engine.kv.host_cache import StateKey
from llmhost.engine.kv.prefix_cache import KvCopy, KvMove, KvOp, KvTrim
from llmhost.engine.kv.swa_checkpoints import CheckpointPolicy, SwaCheckpoints

N_VOCAB = 64
CYCLE = 50  # outputs cycle below the EOG token
EOG = 63
POISON = 55  # a batch holding this token fails to decode
BOMB = 56  # reading the logits after this token fails


def expected(prompt: list[int], n: int) -> list[int]:
    out, last = [], prompt[-1]
    for _ in range(n):
        last = (last + 1) % CYCLE
        out.append(last)
    return out


class FakeModel:
    def __init__(self) -> None:
        self.n_vocab = N_VOCAB
        self.n_batch = 512
        self.eog_tokens = [EOG]
        self.weights_bytes = 0
        self.projector_memory = None  # no --mmproj
        self.ctx: Any = None
        self.decodes: list[list[tuple[list[int], int, int, int]]] = []
        self.applied: list[KvOp] = []
        self.fail_op: KvOp | None = None  # the first apply of this op raises
        self.always_fail = False
        self._rows: dict[int, int] = {}  # batch index -> the token whose logits it holds
        # what each sequence's KV holds, position by position (saved and restored as its "state")
        self.kv: dict[int, list[int]] = {}
        self.refuse_restore = False  # state_seq_load fails, as llama.cpp's does with no room
        # a sequence's shortest reusable prefix, where a test says llama.cpp gave its first cells away
        self.floors: dict[int, int] = {}
        self.state_key = StateKey("fake-model")
        self.checkpoints = SwaCheckpoints(CheckpointPolicy(0, spacing=1, live=0))  # no sliding window

    # vocabulary
    def piece(self, token: int, special: bool = False) -> bytes:
        return f"<{token}>".encode()

    def is_eog(self, token: int) -> bool:
        return token == EOG

    # KV and decode
    def apply(self, op: KvOp) -> None:
        if op == self.fail_op:
            self.fail_op = None
            raise RuntimeError(f"injected failure of {op}")
        if isinstance(op, KvMove):  # as LlamaModel performs it
            self.apply(KvCopy(op.src, op.dst, op.n_tokens))
            self.apply(KvTrim(op.src, 0))
            return
        self.applied.append(op)
        if isinstance(op, KvCopy):
            self.kv[op.dst] = list(self.kv.get(op.src, [])[: op.n_tokens])
            if op.src in self.floors:  # a copy holds the cells its source does
                self.floors[op.dst] = self.floors[op.src]
        elif isinstance(op, KvTrim):
            self.kv[op.seq] = self.kv.get(op.seq, [])[: op.keep]
            if op.keep == 0:
                self.floors.pop(op.seq, None)

    def seq_len(self, seq_id: int) -> int:
        return len(self.kv.get(seq_id, []))

    def holds_context(self, seq_id: int, pos: int) -> bool:
        return self.seq_len(seq_id) == pos and (pos == 0 or pos >= self.kv_floor(seq_id))

    def kv_floor(self, seq_id: int) -> int:
        return self.floors.get(seq_id, 0)

    def reach(self, seq_id: int, n_tokens: int) -> int:
        return n_tokens if n_tokens >= self.kv_floor(seq_id) else 0

    def checkpoint(self, seq_id: int, prompt_len: int) -> bool:
        return False  # no sliding-window layers

    def restore_checkpoint(self, seq_id: int, n_tokens: int) -> bool:
        return False

    def restore_swa(self, seq_id: int, n_tokens: int, data: bytes) -> bool:
        return False

    def state_seq_size(self, seq_id: int) -> int:
        return 4 * len(self.kv.get(seq_id, []))

    def state_seq_save(self, seq_id: int) -> bytes:
        return np.asarray(self.kv.get(seq_id, []), dtype="<i4").tobytes()

    def state_seq_load(self, seq_id: int, data: bytes) -> int:
        if self.refuse_restore:
            self.kv[seq_id] = []
            return 0
        self.kv[seq_id] = np.frombuffer(data, dtype="<i4").astype(int).tolist()
        return len(self.kv[seq_id])

    def decode(self, items: list[tuple[list[int], int, int, int]]) -> list[int]:
        if self.always_fail or any(POISON in tokens for tokens, _, _, _ in items):
            raise RuntimeError("llama_decode failed with code -1")
        self.decodes.append(items)
        self._rows, out_idx, n = {}, [], 0
        for tokens, start, seq_id, n_logits in items:
            self.kv[seq_id] = self.kv.get(seq_id, [])[:start] + list(tokens)
            first = n + len(tokens) - n_logits
            for j, tok in enumerate(tokens):
                if n + j >= first:
                    self._rows[n + j] = tok
            n += len(tokens)
            out_idx.append(first if n_logits else -1)
        return out_idx

    def logits(self, batch_index: int) -> npt.NDArray[np.float32]:
        token = self._rows[batch_index]
        if token == BOMB:
            raise ValueError("injected sampling failure")
        row = np.zeros(N_VOCAB, dtype=np.float32)
        row[(token + 1) % CYCLE] = 10.0
        return row

    def logits_rows(self, batch_index: int, n: int) -> npt.NDArray[np.float32]:
        return np.stack([self.logits(batch_index + i) for i in range(n)])

    def close(self) -> None:
        pass


def config(**kw: Any) -> EngineConfig:
    base: dict[str, Any] = dict(
        max_concurrent=4,
        max_queue=8,
        max_input_tokens=64,
        max_total_tokens=128,
        max_batch_tokens=64,
        prefix_cache_seqs=0,
        prompt_cache_mb=0,
    )
    return EngineConfig(**(base | kw))


def engine_factory(model: FakeModel, cfg: EngineConfig, clock: Callable[[], float] | None = None) -> Engine:
    kw: dict[str, Any] = {"clock": clock} if clock else {}
    return Engine(model, cfg, **kw)  # type: ignore[arg-type]
