"""Draft-model speculation: a smaller GGUF with the target's vocabulary guesses the next tokens.

The draft keeps its own KV per sequence id and catches up on whatever tokens it has not seen, so it needs
none of the target's prefix-cache bookkeeping: a sequence's draft KV is cleared when it is admitted.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from llmhost.engine.kv.prefix_cache import KvMove, KvTrim
from llmhost.engine.llamacpp.model import LlamaModel, ModelLoadError
from llmhost.engine.sched.sequence import Sequence
from llmhost.engine.sched.step_plan import BatchItem

log = logging.getLogger(__name__)


class NoDrafter:
    """No draft model: the step decodes what the scheduler planned (n-gram guesses included), and each
    hook of the draft model's does nothing."""

    has_model = False

    def reset(self, seq: Sequence) -> None:
        pass

    def release(self, seq: Sequence) -> None:
        pass

    def move(self, seq: Sequence, src: int) -> None:
        pass

    def fill(self, items: list[BatchItem]) -> list[BatchItem]:
        return items

    def settle(self, seq: Sequence, n_before: int, accepted: int, drafted: int) -> None:
        pass

    def close(self) -> None:
        pass


class Drafter:
    has_model = True

    def __init__(self, model: LlamaModel, target_vocab: int) -> None:
        if model.n_vocab != target_vocab:
            model.close()
            raise ModelLoadError(
                f"draft model has {model.n_vocab} tokens, the target {target_vocab}: "
                "they must share a vocabulary"
            )
        self.model = model

    def reset(self, seq: Sequence) -> None:
        """A newly admitted sequence: forget what an earlier holder of its id left in the draft KV."""
        self.model.apply(KvTrim(seq.kv_seq, 0))
        seq.draft_pos = 0

    def release(self, seq: Sequence) -> None:
        """A sequence ended: free its draft KV now rather than when its id is next admitted."""
        self.model.apply(KvTrim(seq.kv_seq, 0))
        seq.draft_pos = 0

    def move(self, seq: Sequence, src: int) -> None:
        """`seq`'s KV moved from id `src` to `seq.kv_seq` in the target: its draft KV follows it."""
        self.model.apply(KvMove(src, seq.kv_seq, seq.draft_pos))

    def fill(self, items: list[BatchItem]) -> list[BatchItem]:
        """`items`, those with room for guesses given their drafts; if the draft model fails, `items` as
        they are (drafts only speed things up: the step goes on without them)."""
        wanting = [item for item in items if item.draft_room > 0]
        if not wanting:
            return items
        try:
            proposed = self.propose(wanting)
        except Exception:
            log.exception("draft model failed; decoding without drafts this step")
            for item in wanting:
                self.reset(item.seq)
            return items
        filled = {id(old): new for old, new in zip(wanting, proposed, strict=True)}
        return [filled.get(id(item), item) for item in items]

    def propose(self, items: list[BatchItem]) -> list[BatchItem]:
        """`items` with their drafts filled: up to `draft_room` greedy guesses each, one batched draft
        decode per guessed position."""
        for item in items:
            seq = item.seq
            self._feed(seq, seq.tokens[seq.draft_pos : -1])  # catch up, all but the last token
        drafts: dict[int, list[int]] = {id(item): [] for item in items}
        current = [(item, item.seq.tokens[-1]) for item in items]
        while current:
            batch = [([tok], item.seq.draft_pos, item.seq.kv_seq, 1) for item, tok in current]
            out_idx = self.model.decode(batch)
            following = []
            for (item, _), idx in zip(current, out_idx, strict=True):
                item.seq.draft_pos += 1
                guess = int(np.argmax(self.model.logits(idx)))
                drafts[id(item)].append(guess)
                if len(drafts[id(item)]) < item.draft_room:
                    following.append((item, guess))
            current = following
        return [
            dataclasses.replace(item, tokens=[*item.tokens, *drafts[id(item)]], draft=tuple(drafts[id(item)]))
            for item in items
        ]

    def settle(self, seq: Sequence, n_before: int, accepted: int, drafted: int) -> None:
        """After verification: keep the draft KV of the confirmed tokens only (the last guess was never
        fed to the draft)."""
        seq.draft_pos = n_before + min(accepted, drafted - 1)
        self.model.apply(KvTrim(seq.kv_seq, seq.draft_pos))

    def _feed(self, seq: Sequence, tokens: list[int]) -> None:
        for off in range(0, len(tokens), self.model.n_batch):
            chunk = tokens[off : off + self.model.n_batch]
            self.model.decode([(chunk, seq.draft_pos, seq.kv_seq, 0)])
            seq.draft_pos += len(chunk)

    def close(self) -> None:
        self.model.close()
