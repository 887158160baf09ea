"""The KV operations a step planned, performed on llama.cpp's context and the host-memory tier.

The scheduler plans copies, trims, saves and restores as plain data (`prefix_cache.KvOp`); this runs
them in order, and tells the scheduler what did not happen (a refused restore, a copy of nothing), so
no sequence counts as held a prefix its KV lacks.
"""

from __future__ import annotations

import logging

from llmhost.engine.kv.prefix_cache import KvCopy, KvKeep, KvOp, KvRestore, KvSave, KvTrim
from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.engine.sched.scheduler import Scheduler
from llmhost.engine.sched.sequence import SeqStatus
from llmhost.engine.sched.step_plan import BatchItem
from llmhost.errors import LlmhostError

log = logging.getLogger(__name__)


class KvOpError(LlmhostError, RuntimeError):
    """A KV cache operation failed; it is retried at the next step."""


class KvRunner:
    def __init__(self, model: LlamaModel, scheduler: Scheduler) -> None:
        self.model = model
        self.scheduler = scheduler

    def apply(self, ops: list[KvOp]) -> set[int]:
        """Perform KV operations; if an edit fails, it and those after it are kept for the next step,
        and this step decodes nothing (no sequence is at fault: none is failed). Returns the KV
        sequences whose restore from host memory was refused: they prefill from scratch next step."""
        refused: set[int] = set()
        for i, op in enumerate(ops):
            if isinstance(op, KvSave):
                self.save(op)
                continue
            if isinstance(op, KvRestore):
                if not self.restore(op):
                    refused.add(op.seq)
                continue
            if isinstance(op, KvCopy) and op.src in refused:  # nothing there to copy
                self.scheduler.prefix_lost(op.dst)
                refused.add(op.dst)
                continue
            try:
                if isinstance(op, KvCopy):
                    if not self.copy(op):
                        refused.add(op.dst)
                elif isinstance(op, KvKeep):
                    if not self.keep(op):
                        refused.add(op.seq)
                else:  # a trim, or a running sequence's move, whose copy is checked with the step's items
                    self.model.apply(op)
            except Exception as exc:
                self.scheduler.restore_ops(ops[i:])
                raise KvOpError(f"{op} failed: {exc}") from exc
        return refused

    def copy(self, op: KvCopy) -> bool:
        """Copy a prefix to another sequence, its sliding-window cells from an SWA checkpoint where its
        source's window moved on; False if the copy still lacks what a token after it attends to: the
        target is then emptied, and forgotten if idle, or its request prefills its whole prompt."""
        model = self.model
        model.apply(op)
        if model.holds_context(op.dst, op.n_tokens) or model.restore_checkpoint(op.dst, op.n_tokens):
            return True
        log.info("copy of %d tokens of sequence %d to %d lacks positions", op.n_tokens, op.src, op.dst)
        self.model.apply(KvTrim(op.dst, 0))
        self.scheduler.cache.drop(op.dst)
        self.scheduler.prefix_lost(op.dst)
        return False

    def keep(self, op: KvKeep) -> bool:
        """Cut a slot taken in place to the prefix its request reuses, its sliding-window cells from an
        SWA checkpoint where they moved on; False (the slot emptied, its request prefilling its whole
        prompt) if it still lacks what the next token attends to."""
        model = self.model
        model.apply(KvTrim(op.seq, op.keep))
        if model.holds_context(op.seq, op.keep) or model.restore_checkpoint(op.seq, op.keep):
            return True
        log.info("sequence %d's first %d positions lack what follows them attends to", op.seq, op.keep)
        model.apply(KvTrim(op.seq, 0))
        self.scheduler.prefix_lost(op.seq)
        return False

    def checkpoint(self, items: list[BatchItem]) -> None:
        """Before a step decodes prompt chunks, save the SWA checkpoints their sequences' policy wants at
        the positions they hold; a failure loses the checkpoint only (a later prompt sharing a shorter
        prefix prefills more)."""
        for item in items:
            seq = item.seq
            if seq.status is not SeqStatus.PREFILL or item.start_pos != seq.n_computed:
                continue
            try:
                self.model.checkpoint(seq.kv_seq, len(seq.prompt))
            except Exception:
                log.exception("SWA checkpoint of sequence %d at %d failed", seq.kv_seq, item.start_pos)

    def save(self, op: KvSave) -> None:
        """Keep the state of KV about to leave the context in host memory; a failure loses the copy
        only (its tokens are prefilled again when next needed)."""
        host, key = self.scheduler.host, self.scheduler.state_key_for(op.adapters)
        if host is None:
            return
        tokens = list(op.tokens)
        model = self.model
        try:
            floor, checkpoints = model.kv_floor(op.seq), model.checkpoints.held(op.seq)
            if host.can_store(key, tokens, model.state_seq_size(op.seq), floor, checkpoints):
                host.store(key, tokens, model.state_seq_save(op.seq), floor, checkpoints)
        except Exception:
            log.exception("saving the KV state of sequence %d (%d tokens) failed", op.seq, len(tokens))

    def restore(self, op: KvRestore) -> bool:
        """Load a state from host memory into its (empty) sequence, trimmed to what the prompt shares,
        its sliding-window cells from the SWA checkpoint saved with it where the state's own moved past
        them. False if llama.cpp refused it (e.g. no contiguous cells free): the sequence is then emptied."""
        model = self.model
        try:
            loaded = model.state_seq_load(op.seq, op.data)
            if loaded >= op.keep:
                if loaded > op.keep:
                    model.apply(KvTrim(op.seq, op.keep))
                if not op.swa or model.restore_swa(op.seq, op.keep, op.swa):
                    return True
                why = "its SWA checkpoint was refused"
            else:
                why = f"it holds {loaded}"
            log.warning("restoring %d tokens into sequence %d failed: %s", op.keep, op.seq, why)
        except Exception:
            log.exception("restoring %d tokens into sequence %d failed", op.keep, op.seq)
        self.model.apply(KvTrim(op.seq, 0))
        if self.scheduler.host is not None:
            self.scheduler.host.refused()
        self.scheduler.prefix_lost(op.seq)
        return False

    def preload_prefix(self, tokens: list[int], state: bytes) -> bool:
        """Restore a saved KV state of `tokens` into an empty slot; False if it could not be kept.

        A later prompt starting with `tokens` then prefills only what follows them.
        """
        kv_seq = self.scheduler.cache.adopt(tokens)
        if kv_seq is None:
            return False
        if self.model.state_seq_load(kv_seq, state) != len(tokens):
            for op in self.scheduler.cache.drop(kv_seq):
                self.model.apply(op)
            return False
        return True
