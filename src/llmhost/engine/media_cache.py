"""The embeddings of media encoded lately, by their bytes' SHA-256: a medium sent again (the image of
a conversation, turn after turn, whose KV left the prefix cache; the choices of one request) is
decoded from its embeddings without running the encoder again. Least recently used first out, within
a byte budget."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

# bytes of embeddings kept: a Gemma 3 image's 256 x 2560 floats are 2.5 MiB
DEFAULT_BUDGET_BYTES = 64 << 20


class EmbeddingCache:
    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> npt.NDArray[np.float32] | None:
        embd = self._entries.get(key)
        if embd is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return embd

    def put(self, key: str, embd: npt.NDArray[np.float32]) -> None:
        """Keep `embd` (unless it alone exceeds the budget), dropping the least recently used."""
        if embd.nbytes > self.budget_bytes or key in self._entries:
            return
        self._entries[key] = embd
        self.bytes += embd.nbytes
        while self.bytes > self.budget_bytes:
            _, old = self._entries.popitem(last=False)
            self.bytes -= old.nbytes

    def __len__(self) -> int:
        return len(self._entries)
