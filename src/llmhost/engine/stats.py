"""What the engine reports: its figures (for /metrics and the console) and the observer of its steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from llmhost.engine.request import GenerationEvent


class EngineObserver(Protocol):
    def on_step(self, num_seqs: int, num_tokens: int, seconds: float) -> None: ...

    def on_finish(self, event: GenerationEvent) -> None: ...


@dataclass(slots=True, frozen=True)
class EngineStats:
    running: int
    waiting: int
    kv_tokens_used: int
    kv_tokens_capacity: int
    steps: int
    prefix_cache_lookups: int
    prefix_cache_hits: int
    prefix_cache_reused_tokens: int
    prompt_tokens_prefilled: int
    draft_tokens: int = 0
    draft_tokens_accepted: int = 0
    # the host-memory tier: states restored, prompt tokens they spared, states kept and evicted,
    # restores llama.cpp refused, and the bytes held against the budget
    prompt_cache_hits: int = 0
    prompt_cache_restored_tokens: int = 0
    prompt_cache_stores: int = 0
    prompt_cache_evictions: int = 0
    prompt_cache_restore_failures: int = 0
    prompt_cache_entries: int = 0
    prompt_cache_bytes: int = 0
    prompt_cache_capacity_bytes: int = 0
    # SWA checkpoints (windowed sliding-window layers): made, restored for a shorter shared prefix, and
    # the host bytes those kept hold
    swa_checkpoints_made: int = 0
    swa_checkpoints_restored: int = 0
    swa_checkpoint_bytes: int = 0
    # media (images, audio) run through the projector's encoder, and those whose embeddings were cached
    media_encoded: int = 0
    media_cache_hits: int = 0
