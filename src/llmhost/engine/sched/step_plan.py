"""What the scheduler plans for one step, as plain data: the KV operations to perform, the sequences
admitted, and the batch of tokens to decode."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmhost.engine.kv.prefix_cache import KvOp
from llmhost.engine.lora import AdapterSet
from llmhost.engine.media import MediaSpan
from llmhost.engine.sched.sequence import Sequence


@dataclass(slots=True, frozen=True)
class BatchItem:
    seq: Sequence
    tokens: list[int]
    start_pos: int
    sample: bool  # the last token's logits are needed: sample this sequence's next token
    # speculative guesses after the last sampled token (`tokens` = [last, *draft]); logits are
    # needed at every position to verify them
    draft: tuple[int, ...] = ()
    # draft-model speculation: up to this many guesses may be added by the engine's draft model
    draft_room: int = 0
    # a medium of the prompt: `tokens` are its synthetic ids, its embeddings are decoded instead
    media: MediaSpan | None = None


@dataclass(slots=True)
class StepPlan:
    kv_ops: list[KvOp] = field(default_factory=list)
    items: list[BatchItem] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    # running sequences moved to a lower KV id this step, with the id they left
    moved: list[tuple[Sequence, int]] = field(default_factory=list)
    # the LoRA adapter set every item's sequence runs with: llama.cpp applies one per decode call
    adapters: AdapterSet = ()

    @property
    def num_tokens(self) -> int:
        return sum(len(i.tokens) for i in self.items)

    @property
    def num_seqs(self) -> int:
        return len(self.items)

    @property
    def empty(self) -> bool:
        return not self.items and not self.kv_ops


@dataclass(slots=True)
class StepWidth:
    """The decode part of a step being planned: its tokens, and the tokens it is expected to produce
    (one per sequence, plus the guesses expected to be confirmed)."""

    tokens: int
    produced: float
