"""The synchronous engine: one step = schedule, run, postprocess, returning the events it produced (as
nano-vllm's and vLLM's engine cores do); the caller delivers them, `loop.AsyncEngine` to each request's
stream. The events of an `abort`, `recover` or `close` wait in `take_events`. The output side (events,
a request's last event, the figures) is `output.OutputProcessor`'s; without a draft model the drafter is
a `NoDrafter`, whose hooks do nothing.

A fault stays with the request that caused it: starting a sampler, sampling and turning tokens into
text are guarded per sequence, and a failed batched decode is retried one sequence at a time, so one
bad request fails alone while the others produce what they would have. An error that cannot be
attributed fails the sequences of that step only (`recover`).

Not thread-safe: `loop.AsyncEngine` drives it from a single thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from llmhost.engine.config import EngineConfig
from llmhost.engine.drafter import Drafter, NoDrafter
from llmhost.engine.kv.host_cache import host_cache
from llmhost.engine.kv.prefix_cache import KvTrim
from llmhost.engine.kv_runner import KvOpError, KvRunner
from llmhost.engine.llamacpp.adapters import LoadedAdapters, keys_in_use
from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.engine.media import text_ids
from llmhost.engine.media_cache import EmbeddingCache
from llmhost.engine.output import Active, OutputProcessor
from llmhost.engine.request import (
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    InvalidRequestError,
    TokenLogprob,
    check_limits,
    check_token_ids,
)
from llmhost.engine.sample.constraint import ConstraintCompiler, grammar_of
from llmhost.engine.sample.sampling import Sampler, prompt_logprobs, verify_draft
from llmhost.engine.sched.scheduler import Scheduler
from llmhost.engine.sched.sequence import SeqStatus, Sequence, new_sequence
from llmhost.engine.sched.step_plan import BatchItem, StepPlan
from llmhost.engine.stats import EngineObserver, EngineStats
from llmhost.engine.text import IncrementalDetokenizer

log = logging.getLogger(__name__)
# seconds between the stats a busy engine publishes: building them costs ~50 us a step after a decode
# (cold caches), 0.3% of a one-user step at the default model; the readers (metrics, the console) look
# once a second at most. An engine left idle by a step publishes at once.
STATS_INTERVAL_S = 0.1


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
        self.drafter: Drafter | NoDrafter = drafter if drafter is not None else NoDrafter()
        self.config = config
        reserved = model.weights_bytes + (model.checkpoints.policy.budget or 0) + _media_bytes(model)
        host = host_cache(config, reserved)
        state_key = model.state_key if host is not None else None
        self.scheduler = Scheduler(
            config, host, state_key, model.reach, config.prompt_logits_rows(model.n_vocab)
        )
        self.adapters = LoadedAdapters(model, config.adapters, config.max_loras)
        self.kv = KvRunner(model, self.scheduler)
        self.clock = clock
        self.output = OutputProcessor(observer, clock)
        self._active: dict[str, Active] = {}
        # the step in progress: what an unexpected failure is attributed to
        self._plan: StepPlan | None = None
        self.step_started_s = 0.0
        self._constraints: ConstraintCompiler | None = None
        # media encoded lately, by hash: a medium sent again is not encoded again
        self.media_cache = EmbeddingCache()
        self.media_encoded = 0
        self.snapshot = self.stats()
        self._published_s = 0.0  # clock time `snapshot` was last made by a step

    @property
    def constraints(self) -> ConstraintCompiler:
        """Grammar support for this model's vocabulary (built on the first structured request)."""
        if self._constraints is None:
            model = self.model
            self._constraints = ConstraintCompiler(model.vocab, model.n_vocab, lambda: model.eog_tokens)
        return self._constraints

    # -- requests ------------------------------------------------------------------------------------
    def add(self, request: GenerationRequest, arrival_s: float | None = None) -> None:
        """Queue a request; raises (and queues nothing) if it is invalid."""
        check_limits(self.config, request.prompt_cells, request.params.max_tokens)
        check_token_ids(request, self.model.n_vocab)
        if request.media and request.params.prompt_logprobs:
            raise InvalidRequestError("logprobs", "prompt logprobs are not computed over images or audio")
        self.adapters.check(request, self.adapters_in_use)
        if request.request_id in self._active:
            raise ValueError(f"duplicate request id {request.request_id}")
        arrival = self.clock() if arrival_s is None else arrival_s
        seq = new_sequence(request, self.config, arrival, draft_model=self.drafter.has_model)
        keep, piece = request.params.render_special, self.model.piece
        pieces = (lambda t: piece(t, t in keep)) if keep else piece
        detok = IncrementalDetokenizer(pieces, request.params.stop)
        self._active[request.request_id] = Active(seq, request.params, detok)
        self.scheduler.add(seq)
        self.snapshot = self.stats()

    def abort(self, request_id: str, reason: str = "client") -> None:
        active = self._active.get(request_id)
        if active is not None:
            self._finish(active, FinishReason.ABORT, reason=reason)
        self.snapshot = self.stats()

    def adapters_in_use(self) -> list[str]:
        """The adapter keys of the requests held, once per request."""
        return keys_in_use(a.seq.adapters for a in self._active.values())

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    # -- the step ------------------------------------------------------------------------------------
    def step(self) -> list[GenerationEvent]:
        """Schedule, run and postprocess one batch; returns the events produced since the last call."""
        self.step_started_s = start = self.clock()
        self._expire(start)
        self._plan = plan = self.scheduler.schedule(start)
        if not plan.empty:
            self._postprocess(plan, self._run(plan))
            if plan.items:
                self.output.stepped(plan, self.clock() - start, self.scheduler.step_cost)
        self._plan = None
        if not self.has_work or start - self._published_s >= STATS_INTERVAL_S:
            self._published_s = start
            self.snapshot = self.stats()
        return self.take_events()

    def take_events(self) -> list[GenerationEvent]:
        """The events produced and not yet returned, in order."""
        return self.output.take_events()

    @property
    def steps(self) -> int:
        return self.output.steps

    def _run(self, plan: StepPlan) -> dict[str, list[int]]:
        for seq in plan.admitted:
            self._guard(seq, "sampler", self._start, seq)
        try:
            refused = self.kv.apply(plan.kv_ops)
        except KvOpError:
            self._plan = None  # no sequence is at fault: none is failed by `recover`
            raise
        for seq, src in plan.moved:
            self._guard(seq, "draft model", self.drafter.move, seq, src)
        plan.items = [
            i
            for i in plan.items
            if i.seq.status is not SeqStatus.FINISHED and i.seq.kv_seq not in refused and self._kv_holds(i)
        ]
        self.kv.checkpoint(plan.items)
        media = [i for i in plan.items if i.media is not None]
        for item in media:
            self._guard(item.seq, "media decode", self._decode_media, item)
        tokens = self.drafter.fill([i for i in plan.items if i.media is None])
        plan.items = [*(i for i in media if not i.seq.finished), *tokens]
        return self._decode_and_sample(tokens) if tokens else {}

    def _decode_media(self, item: BatchItem) -> None:
        """A medium of a prompt into its sequence's KV: its embeddings from the cache, else encoded now,
        decoded in llama_decode calls of its own (a projector may turn causal attention off for them,
        which must not apply to other sequences' tokens)."""
        span, seq = item.media, item.seq
        assert span is not None
        embd = self.media_cache.get(span.sha256)
        if embd is None:
            start = self.clock()
            embd = self.model.encode_media(span)
            seq.encode_s += self.clock() - start
            self.media_encoded += 1
            self.media_cache.put(span.sha256, embd)
        self.adapters.apply(seq.adapters)
        self.model.decode_media(span, embd, seq.kv_seq)

    def _kv_holds(self, item: BatchItem) -> bool:
        """Whether `item`'s sequence holds what its tokens attend to. llama.cpp decodes without a word
        into a sequence lacking positions before the ones decoded (empty, or whose sliding-window
        cells went to other sequences): the prompt would be computed without its prefix, and that
        wrong KV served to later prompts sharing it. A prompt in that state is prefilled again from its
        start; a sequence already answering fails."""
        seq = item.seq
        if self.model.holds_context(seq.kv_seq, item.start_pos):
            return True
        log.warning(
            "request %s: sequence %d lacks positions its tokens at %d attend to (%d held)",
            seq.request_id,
            seq.kv_seq,
            item.start_pos,
            self.model.seq_len(seq.kv_seq),
        )
        if seq.status is SeqStatus.PREFILL:
            self.model.apply(KvTrim(seq.kv_seq, 0))
            self.scheduler.prefix_lost(seq.kv_seq)
        else:
            self._fail(seq, "its KV cache did not hold what it had computed (see the server log)", "kv")
        return False

    def _start(self, seq: Sequence) -> None:
        active = self._active[seq.request_id]
        constraint = active.params.constraint
        matcher = None if constraint is None else self.constraints.matcher(grammar_of(constraint))
        prompt = text_ids(seq.prompt) if seq.media else seq.prompt
        active.sampler = Sampler(self.model, active.params, prompt, matcher)
        self.drafter.reset(seq)

    def _guard(self, seq: Sequence, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run one sequence's part of the step; an error in it fails that request alone."""
        try:
            fn(*args)
        except Exception as exc:
            log.exception("request %s: %s failed", seq.request_id, what)
            self._fail(seq, f"{what} failed: {type(exc).__name__}: {exc}", what)

    @staticmethod
    def _prompt_logits(item: BatchItem) -> bool:
        """A prompt chunk of a request that wants prompt logprobs: every position's logits are kept."""
        return item.seq.prompt_logprobs and item.start_pos < len(item.seq.prompt)

    def _n_logits(self, item: BatchItem) -> int:
        if self._prompt_logits(item):
            return len(item.tokens)
        return (1 + len(item.draft)) if item.sample else 0

    def _decode_and_sample(self, items: list[BatchItem]) -> dict[str, list[int]]:
        if self.config.isolate_prompts and len(items) > 1:
            groups = isolated(items)
            if len(groups) > 1:
                sampled: dict[str, list[int]] = {}
                for group in groups:
                    sampled |= self._decode_and_sample(group)
                return sampled
        batch = [(i.tokens, i.start_pos, i.seq.kv_seq, self._n_logits(i)) for i in items]
        try:
            self.adapters.apply(items[0].seq.adapters)  # a step holds the sequences of one adapter set
            out_idx = self.model.decode(batch)
        except (RuntimeError, ValueError) as exc:
            if len(items) == 1:
                self._fail(items[0].seq, f"decode failed: {exc}", "decode")
                return {}
            log.warning("decode of %d sequences failed (%s); decoding each alone", len(items), exc)
            return self._decode_each(items)
        return self._sample(items, out_idx)

    def _decode_each(self, items: list[BatchItem]) -> dict[str, list[int]]:
        """After a failed batch: forget what it wrote, then decode and sample every item on its own, so
        only the item that fails alone is failed."""
        for item in items:
            self.model.apply(KvTrim(item.seq.kv_seq, item.start_pos))
        sampled: dict[str, list[int]] = {}
        for item in items:
            sampled |= self._decode_and_sample([item])
        return sampled

    def _sample(self, items: list[BatchItem], out_idx: list[int]) -> dict[str, list[int]]:
        sampled: dict[str, list[int]] = {}
        for item, idx in zip(items, out_idx, strict=True):
            if idx < 0:
                continue
            active = self._active[item.seq.request_id]
            if self._prompt_logits(item):
                self._guard(item.seq, "prompt logprobs", self._prompt_logprobs, active, item, idx)
                idx += len(item.tokens) - 1
                if not item.sample or item.seq.finished:
                    continue
            self._guard(item.seq, "sampling", self._sample_one, active, idx, item.draft)
            if not item.seq.finished:
                sampled[item.seq.request_id] = [token for token, _ in active.pending]
        return sampled

    def _prompt_logprobs(self, active: Active, item: BatchItem, idx: int) -> None:
        """Each position of this prompt chunk predicts the next prompt token: its logprob."""
        following = item.seq.prompt[item.start_pos + 1 : item.start_pos + 1 + len(item.tokens)]
        if following:
            rows = self.model.logits_rows(idx, len(item.tokens))
            active.prompt_logprobs += prompt_logprobs(rows, following, active.params.logprobs or 0)

    def _sample_one(self, active: Active, idx: int, draft: tuple[int, ...]) -> None:
        assert active.sampler is not None
        active.pending = verify_draft(active.sampler, idx, draft)

    def _postprocess(self, plan: StepPlan, sampled: dict[str, list[int]]) -> None:
        self.scheduler.postprocess(plan, sampled, self.clock())
        for item in plan.items:
            seq = item.seq
            if seq.status is SeqStatus.FINISHED:
                continue
            if item.draft:
                self._guard(seq, "draft model", self._settle, item, sampled)
            if item.start_pos < len(seq.prompt):
                self.output.prefilled(len(item.tokens))
            if seq.prefilled_only:
                self._finish(self._active[seq.request_id], FinishReason.LENGTH)
            elif item.sample and not seq.finished:
                self._guard(seq, "detokenize", self._emit_tokens, self._active[seq.request_id])

    def _settle(self, item: BatchItem, sampled: dict[str, list[int]]) -> None:
        seq = item.seq
        tokens = sampled[seq.request_id]
        n_before = len(seq.prompt) + len(seq.output) - len(tokens)
        self.drafter.settle(seq, n_before, len(tokens) - 1, len(item.draft))

    def _emit_tokens(self, active: Active) -> None:
        out = self.output.emit(active, self.model.is_eog)
        if out.finish is None:
            return
        seq = active.seq
        del seq.output[out.n_output :]
        seq.n_computed = min(seq.n_computed, len(seq.prompt) + len(seq.output))
        self._finish(active, out.finish, out.text, out.tokens, out.logprobs)

    def _expire(self, now: float) -> None:
        for seq, which in self.scheduler.expired(now):
            waited = now - seq.arrival_s
            end = min(seq.queue_deadline_s, seq.deadline_s) if which == "queue" else seq.deadline_s
            limit = end - seq.arrival_s
            what = "waited for a sequence slot" if which == "queue" else "ran"
            message = f"request {what} {waited:.1f} s; its {which} timeout is {limit:g} s"
            self._finish(self._active[seq.request_id], FinishReason.TIMEOUT, error=message, reason=which)

    # -- leaving -------------------------------------------------------------------------------------
    def _finish(
        self,
        active: Active,
        finish: FinishReason,
        text: str = "",
        tokens: list[int] | None = None,
        logprobs: list[TokenLogprob] | None = None,
        error: str | None = None,
        reason: str = "",
    ) -> None:
        seq = active.seq
        # KV of a failed decode may be half-written: never reuse it
        self.scheduler.finish(seq, reusable=finish is not FinishReason.ERROR)
        if active.sampler is not None:
            active.sampler.close()
        if seq.kv_seq >= 0:
            self.drafter.release(seq)
        del self._active[seq.request_id]
        self.output.finished(active, finish, text, tokens, logprobs, error, reason)

    def _fail(self, seq: Sequence, message: str, reason: str) -> None:
        active = self._active.get(seq.request_id)
        if active is not None:
            self._finish(active, FinishReason.ERROR, error=message, reason=reason)

    def recover(self) -> int:
        """After `step` raised unexpectedly: fail the requests that step held (their KV may be
        half-written); waiting requests and pending KV operations are kept. Returns how many failed."""
        plan, self._plan = self._plan, None
        seqs = [] if plan is None else [*plan.admitted, *(i.seq for i in plan.items)]
        failed = 0
        for seq in dict.fromkeys(seqs):
            if seq.status is not SeqStatus.FINISHED:
                self._fail(seq, "internal engine error during a step (see the server log)", "engine_step")
                failed += 1
        self.snapshot = self.stats()
        return failed

    @property
    def stepping(self) -> bool:
        return self._plan is not None

    def describe_step(self) -> str:
        """What the step in progress holds, for a slow-step log line (read from another thread)."""
        plan = self._plan
        if plan is None:
            return "no step in progress"
        items = list(plan.items)
        held = ", ".join(f"{i.seq.request_id}:{len(i.tokens)}@{i.start_pos}" for i in items[:16])
        return f"{len(items)} sequences, {sum(len(i.tokens) for i in items)} tokens [{held}]"

    def stats(self) -> EngineStats:
        return self.output.stats(
            self.scheduler,
            self.model.checkpoints,
            self.config.n_ctx,
            self.media_encoded,
            self.media_cache.hits,
        )

    def close(self) -> None:
        for request_id in list(self._active):
            self.abort(request_id, "shutdown")
        if self._constraints is not None:
            self._constraints.close()
        self.model.close()
        self.drafter.close()


def isolated(items: list[BatchItem]) -> list[list[BatchItem]]:
    """A step's items as `isolate_prompts` decodes them: the decoding sequences together (as they
    would run without other requests when they are the step's only ones), each prompt chunk alone. Each
    group's logits are sampled before the next decode overwrites them."""
    decoding = [i for i in items if i.start_pos >= len(i.seq.prompt)]
    prompts = [[i] for i in items if i.start_pos < len(i.seq.prompt)]
    return ([decoding] if decoding else []) + prompts


def _media_bytes(model: LlamaModel) -> int:
    """What the projector will take beyond the weights it loaded: its encoder's buffers, touched at the
    first encode, and the media embeddings cache (projector_memory.py)."""
    p = model.projector_memory
    return p.encoder_bytes + p.embeddings_bytes if p is not None else 0
