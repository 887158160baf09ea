"""The synchronous engine: one step = schedule, run, postprocess.

Not thread-safe: `loop.AsyncEngine` drives it from a single thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from llmhost.engine.config import EngineConfig
from llmhost.engine.drafter import Drafter
from llmhost.engine.llama import LlamaModel
from llmhost.engine.request import (
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    RequestTooLargeError,
    SamplingParams,
    Timings,
    TokenLogprob,
)
from llmhost.engine.sampling import Sampler, plain_greedy
from llmhost.engine.scheduler import BatchItem, Scheduler, StepPlan
from llmhost.engine.sequence import SeqStatus, Sequence
from llmhost.engine.speculative import NgramIndex
from llmhost.engine.text import IncrementalDetokenizer

log = logging.getLogger(__name__)

Emit = Callable[[GenerationEvent], None]


class EngineObserver(Protocol):
    def on_step(self, num_seqs: int, num_tokens: int, seconds: float) -> None: ...

    def on_finish(self, event: GenerationEvent) -> None: ...


@dataclass(slots=True)
class EngineStats:
    running: int
    waiting: int
    kv_tokens_used: int
    kv_tokens_capacity: int
    steps: int
    prefix_cache_hits: int
    prefix_cache_reused_tokens: int
    prompt_tokens_prefilled: int
    draft_tokens: int = 0
    draft_tokens_accepted: int = 0


@dataclass(slots=True, eq=False)
class _Active:
    seq: Sequence
    params: SamplingParams
    emit: Emit
    detok: IncrementalDetokenizer
    sampler: Sampler | None = None
    pending: list[tuple[int, TokenLogprob | None]] = field(default_factory=list)


def check_limits(config: EngineConfig, n_prompt: int, max_tokens: int) -> None:
    """Raise RequestTooLargeError naming the field and both numbers."""
    if n_prompt == 0:
        raise RequestTooLargeError("prompt", 0, 1, "the prompt is empty: at least one token is needed")
    if n_prompt > config.max_input_tokens:
        raise RequestTooLargeError(
            "prompt",
            n_prompt,
            config.max_input_tokens,
            f"the prompt has {n_prompt} tokens; MAX_INPUT_LENGTH is {config.max_input_tokens}",
        )
    if n_prompt + max_tokens > config.max_total_tokens:
        raise RequestTooLargeError(
            "max_tokens",
            n_prompt + max_tokens,
            config.max_total_tokens,
            f"prompt tokens ({n_prompt}) + max new tokens ({max_tokens}) = {n_prompt + max_tokens} "
            f"exceeds MAX_TOTAL_TOKENS {config.max_total_tokens}",
        )


class Engine:
    def __init__(
        self,
        model: LlamaModel,
        config: EngineConfig,
        observer: EngineObserver | None = None,
        clock: Callable[[], float] = time.perf_counter,
        drafter: Drafter | None = None,
    ) -> None:
        self.model = model
        self.drafter = drafter
        self.config = config
        self.scheduler = Scheduler(config)
        self.observer = observer
        self.clock = clock
        self._active: dict[str, _Active] = {}
        self.steps = 0
        self.prompt_tokens_prefilled = 0
        self.draft_tokens = 0
        self.draft_tokens_accepted = 0

    # -- requests ------------------------------------------------------------------------------------
    def add(self, request: GenerationRequest, emit: Emit, arrival_s: float | None = None) -> None:
        check_limits(self.config, len(request.prompt_tokens), request.params.max_tokens)
        if request.request_id in self._active:
            raise ValueError(f"duplicate request id {request.request_id}")
        seq = Sequence(
            request_id=request.request_id,
            prompt=list(request.prompt_tokens),
            max_tokens=request.params.max_tokens,
            arrival_s=self.clock() if arrival_s is None else arrival_s,
        )
        if self.drafter is not None and plain_greedy(request.params):
            seq.drafted = True
        elif self.config.speculative == "ngram" and plain_greedy(request.params):
            # verification compares argmaxes, so only plain greedy sequences speculate
            seq.ngrams = NgramIndex(self.config.ngram_size)
            seq.ngrams.extend(seq.prompt)
        detok = IncrementalDetokenizer(self.model.piece, request.params.stop)
        self._active[request.request_id] = _Active(seq, request.params, emit, detok)
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> None:
        active = self._active.get(request_id)
        if active is not None:
            self._finish(active, FinishReason.ABORT, "", [], [])

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    # -- the step ------------------------------------------------------------------------------------
    def step(self) -> None:
        start = self.clock()
        plan = self.scheduler.schedule(start)
        if plan.empty:
            return
        sampled = self._run(plan)
        self._postprocess(plan, sampled)
        if plan.items:
            self._count(plan, self.clock() - start)

    def _run(self, plan: StepPlan) -> dict[str, list[int]]:
        for op in plan.kv_ops:
            self.model.apply(op)
        for seq in plan.admitted:
            active = self._active[seq.request_id]
            active.sampler = Sampler(self.model, active.params, seq.prompt)
            if self.drafter is not None:
                self.drafter.reset(seq)
        if not plan.items:
            return {}
        if self.drafter is not None:
            plan.items = self._with_drafts(self.drafter, plan.items)
        batch = [
            (i.tokens, i.start_pos, i.seq.kv_seq, (1 + len(i.draft)) if i.sample else 0) for i in plan.items
        ]
        try:
            out_idx = self.model.decode(batch)
        except RuntimeError as exc:
            log.error("decode failed: %s", exc)
            for item in plan.items:
                self._fail(item.seq, str(exc))
            return {}
        sampled: dict[str, list[int]] = {}
        for item, idx in zip(plan.items, out_idx, strict=True):
            if idx < 0:
                continue
            active = self._active[item.seq.request_id]
            assert active.sampler is not None
            active.pending = self._verify(active.sampler, idx, item.draft)
            sampled[item.seq.request_id] = [token for token, _ in active.pending]
        return sampled

    @staticmethod
    def _with_drafts(drafter: Drafter, items: list[BatchItem]) -> list[BatchItem]:
        wanting = [item for item in items if item.draft_room > 0]
        if not wanting:
            return items
        filled = {id(old): new for old, new in zip(wanting, drafter.propose(wanting), strict=True)}
        return [filled.get(id(item), item) for item in items]

    @staticmethod
    def _verify(sampler: Sampler, idx: int, draft: tuple[int, ...]) -> list[tuple[int, TokenLogprob | None]]:
        """The model's own tokens at each drafted position, up to and including the first that differs
        from the draft (all accepted: one more, from the last position)."""
        out = []
        for j in range(len(draft) + 1):
            token, logprob = sampler.sample(idx + j)
            out.append((token, logprob))
            if j == len(draft) or token != draft[j]:
                break
        return out

    def _postprocess(self, plan: StepPlan, sampled: dict[str, list[int]]) -> None:
        now = self.clock()
        self.scheduler.postprocess(plan, sampled, now)
        if self.drafter is not None:
            for item in plan.items:
                if item.draft and item.seq.request_id in sampled:
                    tokens = sampled[item.seq.request_id]
                    n_before = len(item.seq.prompt) + len(item.seq.output) - len(tokens)
                    self.drafter.settle(item.seq, n_before, len(tokens) - 1, len(item.draft))
        for item in plan.items:
            seq = item.seq
            if seq.status is SeqStatus.FINISHED:
                continue
            if item.start_pos < len(seq.prompt):
                self.prompt_tokens_prefilled += len(item.tokens)
            if item.sample:
                self._on_tokens(self._active[seq.request_id])

    def _on_tokens(self, active: _Active) -> None:
        """Emit this step's tokens (several when drafts were accepted), stopping at the first that ends
        the sequence; tokens after it are dropped as if never generated."""
        seq = active.seq
        pending, active.pending = active.pending, []
        base = len(seq.output) - len(pending)
        text = ""
        tokens: list[int] = []
        logprobs: list[TokenLogprob] = []
        for i, (token, logprob) in enumerate(pending):
            tokens.append(token)
            if logprob is not None:
                logprobs.append(logprob)
            reason: FinishReason | None = None
            if self.model.is_eog(token) and not active.params.ignore_eos:
                reason, piece = FinishReason.EOS, active.detok.finish()
            else:
                piece = active.detok.add(token)
                if active.detok.stop.matched is not None:
                    reason = FinishReason.STOP
                elif base + i + 1 >= seq.max_tokens:
                    reason, piece = FinishReason.LENGTH, piece + active.detok.finish()
            text += piece
            if reason is not None:
                self._truncate(seq, base + i + 1)
                self._finish(active, reason, text, tokens, logprobs)
                return
        active.emit(GenerationEvent(seq.request_id, tokens, text, logprobs))

    @staticmethod
    def _truncate(seq: Sequence, n_output: int) -> None:
        del seq.output[n_output:]
        seq.n_computed = min(seq.n_computed, len(seq.prompt) + len(seq.output))

    def _finish(
        self,
        active: _Active,
        reason: FinishReason,
        text: str,
        tokens: list[int],
        logprobs: list[TokenLogprob],
        error: str | None = None,
    ) -> None:
        seq = active.seq
        # KV of a failed decode may be half-written: never reuse it
        self.scheduler.finish(seq, reusable=reason is not FinishReason.ERROR)
        if active.sampler is not None:
            active.sampler.close()
        del self._active[seq.request_id]
        timings = self._timings(seq)
        self.draft_tokens += seq.draft_n
        self.draft_tokens_accepted += seq.draft_accepted
        event = GenerationEvent(
            seq.request_id,
            tokens,
            text,
            logprobs,
            finish_reason=reason,
            timings=timings,
            prompt_tokens=len(seq.prompt),
            completion_tokens=len(seq.output),
            error=error,
        )
        if reason is not FinishReason.ABORT:
            log.info("request %s finished (%s)\n%s", seq.request_id, reason.value, timings.print_timings())
        active.emit(event)
        if self.observer is not None:
            self.observer.on_finish(event)

    def _fail(self, seq: Sequence, message: str) -> None:
        active = self._active.get(seq.request_id)
        if active is not None:
            self._finish(active, FinishReason.ERROR, "", [], [], error=message)

    def _timings(self, seq: Sequence) -> Timings:
        end = self.clock()
        t = Timings(
            cache_n=seq.n_reused,
            predicted_n=len(seq.output),
            draft_n=seq.draft_n,
            draft_n_accepted=seq.draft_accepted,
        )
        if seq.admitted_s:
            t.queue_ms = 1000 * (seq.admitted_s - seq.arrival_s)
            t.prompt_n = min(seq.n_computed, len(seq.prompt)) - seq.n_reused
        else:
            t.queue_ms = 1000 * (end - seq.arrival_s)
        if seq.first_token_s:
            t.prompt_ms = 1000 * (seq.first_token_s - seq.admitted_s)
            t.predicted_ms = 1000 * (seq.last_token_s - seq.first_token_s)
            t.ttft_ms = 1000 * (seq.first_token_s - seq.arrival_s)
        t.total_ms = 1000 * (end - seq.arrival_s)
        return t

    def _count(self, plan: StepPlan, seconds: float) -> None:
        self.steps += 1
        if self.observer is not None:
            self.observer.on_step(plan.num_seqs, plan.num_tokens, seconds)

    def preload_prefix(self, tokens: list[int], state: bytes) -> bool:
        """Restore a saved KV state of `tokens` as an idle cached prefix; False if it could not be kept.

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

    def stats(self) -> EngineStats:
        sched = self.scheduler
        return EngineStats(
            running=len(sched.running),
            waiting=len(sched.waiting),
            kv_tokens_used=sched.kv_tokens_used,
            kv_tokens_capacity=self.config.n_ctx,
            steps=self.steps,
            prefix_cache_hits=sched.cache.hits,
            prefix_cache_reused_tokens=sched.cache.reused_tokens,
            prompt_tokens_prefilled=self.prompt_tokens_prefilled,
            draft_tokens=self.draft_tokens,
            draft_tokens_accepted=self.draft_tokens_accepted,
        )

    def close(self) -> None:
        for request_id in list(self._active):
            self.abort(request_id)
        self.model.close()
        if self.drafter is not None:
            self.drafter.close()
