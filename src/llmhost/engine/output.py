"""Output processing, apart from the step (vLLM's output processor beside its engine core): sampled
tokens -> text deltas, stop/EOS/length checks, each request's events and timings, and the engine's
figures. Pure Python over plain data; the engine calls it after each decode and when a request ends."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmhost.engine.media import kv_cells
from llmhost.engine.request import FinishReason, GenerationEvent, SamplingParams, Timings, TokenLogprob
from llmhost.engine.sample.sampling import Sampler
from llmhost.engine.sched.sequence import Sequence
from llmhost.engine.stats import EngineObserver, EngineStats
from llmhost.engine.text import IncrementalDetokenizer

if TYPE_CHECKING:
    from llmhost.engine.kv.swa_checkpoints import SwaCheckpoints
    from llmhost.engine.sched.scheduler import Scheduler
    from llmhost.engine.sched.step_cost import StepCost
    from llmhost.engine.sched.step_plan import StepPlan

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Active:
    """A request the engine holds: its sequence, settings and per-request state."""

    seq: Sequence
    params: SamplingParams
    detok: IncrementalDetokenizer
    sampler: Sampler | None = None
    pending: list[tuple[int, TokenLogprob | None]] = field(default_factory=list)
    # prompt logprobs computed and not yet sent (they go with the next event)
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)

    def take_prompt_logprobs(self) -> list[TokenLogprob]:
        out, self.prompt_logprobs = self.prompt_logprobs, []
        return out


@dataclass(slots=True)
class StepOutput:
    """What one step produced for one request: the tokens to emit, their text, and whether it ended."""

    tokens: list[int]
    text: str
    logprobs: list[TokenLogprob]
    finish: FinishReason | None = None
    # output tokens to keep when the request ended before the last sampled token
    n_output: int = 0


def process_tokens(active: Active, is_eog: Callable[[int], bool]) -> StepOutput:
    """This step's tokens (several when drafts were accepted), stopping at the first that ends the
    sequence; tokens after it are dropped as if never generated."""
    seq = active.seq
    pending, active.pending = active.pending, []
    base = len(seq.output) - len(pending)
    out = StepOutput([], "", [])
    for i, (token, logprob) in enumerate(pending):
        out.tokens.append(token)
        if logprob is not None:
            out.logprobs.append(logprob)
        if is_eog(token) and not active.params.ignore_eos:
            out.finish, piece = FinishReason.EOS, active.detok.finish()
        else:
            piece = active.detok.add(token)
            if active.detok.stop.matched is not None:
                out.finish = FinishReason.STOP
            elif active.sampler is not None and active.sampler.done:
                # the grammar is complete: the output ends as if a stop sequence had matched
                out.finish, piece = FinishReason.STOP, piece + active.detok.finish()
            elif base + i + 1 >= seq.max_tokens:
                out.finish, piece = FinishReason.LENGTH, piece + active.detok.finish()
        out.text += piece
        if out.finish is not None:
            out.n_output = base + i + 1
            return out
    return out


def timings(seq: Sequence, end_s: float) -> Timings:
    """llama.cpp's print_timings figures of one request, as of `end_s`."""
    t = Timings(
        cache_n=kv_cells(seq.n_reused, seq.media),
        predicted_n=len(seq.output),
        draft_n=seq.draft_n,
        draft_n_accepted=seq.draft_accepted,
        encode_ms=1000 * seq.encode_s,
    )
    if seq.admitted_s:
        t.queue_ms = 1000 * (seq.admitted_s - seq.arrival_s)
        t.prompt_n = kv_cells(min(seq.n_computed, len(seq.prompt)), seq.media) - t.cache_n
    else:
        t.queue_ms = 1000 * (end_s - seq.arrival_s)
    if seq.first_token_s:
        t.prompt_ms = 1000 * (seq.first_token_s - seq.admitted_s)
        t.predicted_ms = 1000 * (seq.last_token_s - seq.first_token_s)
        t.ttft_ms = 1000 * (seq.first_token_s - seq.arrival_s)
    t.total_ms = 1000 * (end_s - seq.arrival_s)
    return t


class OutputProcessor:
    """The engine's output side: a step's tokens as events, a request's last event (logged, and counted
    by the observer before the client sees it), the events held until the caller takes them, and the
    figures of the steps run and the requests ended."""

    def __init__(self, observer: EngineObserver | None, clock: Callable[[], float]) -> None:
        self.observer = observer
        self.clock = clock
        # events produced and not yet returned by the engine's `step` or `take_events`
        self._events: list[GenerationEvent] = []
        self.steps = 0
        self.prompt_tokens_prefilled = 0
        self.draft_tokens = 0
        self.draft_tokens_accepted = 0

    def emit(self, active: Active, is_eog: Callable[[int], bool]) -> StepOutput:
        """`active`'s tokens of this step as an event, unless they end the request: then the output the
        engine finishes it with."""
        out = process_tokens(active, is_eog)
        if out.finish is None:
            event = GenerationEvent(active.seq.request_id, out.tokens, out.text, out.logprobs)
            event.prompt_logprobs = active.take_prompt_logprobs()
            self._events.append(event)
        return out

    def finished(
        self,
        active: Active,
        finish: FinishReason,
        text: str,
        tokens: list[int] | None,
        logprobs: list[TokenLogprob] | None,
        error: str | None,
        reason: str,
    ) -> None:
        """The last event of a request the engine let go of."""
        seq = active.seq
        self.draft_tokens += seq.draft_n
        self.draft_tokens_accepted += seq.draft_accepted
        t = timings(seq, self.clock())
        event = GenerationEvent(
            seq.request_id,
            tokens or [],
            text,
            logprobs or [],
            finish,
            t,
            kv_cells(len(seq.prompt), seq.media),
            len(seq.output),
            error,
            active.take_prompt_logprobs(),
            reason,
        )
        event.stop_sequence = active.detok.stop.matched
        event.reasoning_tokens = active.sampler.reasoning_tokens if active.sampler is not None else 0
        if finish is not FinishReason.ABORT:
            log.info(
                "request %s finished (%s%s)\n%s",
                seq.request_id,
                finish.value,
                f": {error}" if error else "",
                t.print_timings(),
            )
        self._observe(event)
        self._events.append(event)

    def _observe(self, event: GenerationEvent) -> None:
        """The last event of a request, counted before the client can see it; a failing observer must
        not stop the engine."""
        if self.observer is not None:
            try:
                self.observer.on_finish(event)
            except Exception:
                log.exception("observer failed on request %s", event.request_id)

    def take_events(self) -> list[GenerationEvent]:
        """The events produced and not yet returned, in order."""
        events, self._events = self._events, []
        return events

    def prefilled(self, n_tokens: int) -> None:
        self.prompt_tokens_prefilled += n_tokens

    def stepped(self, plan: StepPlan, seconds: float, step_cost: StepCost) -> None:
        """A step that ran `plan` in `seconds`; one that only decoded tells `step_cost` what a token costs."""
        self.steps += 1
        if plan.items and all(i.sample and i.start_pos >= len(i.seq.prompt) for i in plan.items):
            step_cost.observe(plan.num_tokens, seconds)
        if self.observer is not None:
            self.observer.on_step(plan.num_seqs, plan.num_tokens, seconds)

    def stats(
        self,
        sched: Scheduler,
        checkpoints: SwaCheckpoints,
        n_ctx: int,
        media_encoded: int,
        media_cache_hits: int,
    ) -> EngineStats:
        """The figures as of now, with the engine's counts of media encoded and found cached."""
        return EngineStats(
            running=len(sched.running),
            waiting=len(sched.waiting),
            kv_tokens_used=sched.kv_tokens_used,
            kv_tokens_capacity=n_ctx,
            steps=self.steps,
            prefix_cache_lookups=sched.cache.lookups,
            prefix_cache_hits=sched.cache.hits,
            prefix_cache_reused_tokens=sched.cache.reused_tokens,
            prompt_tokens_prefilled=self.prompt_tokens_prefilled,
            draft_tokens=self.draft_tokens,
            draft_tokens_accepted=self.draft_tokens_accepted,
            swa_checkpoints_made=checkpoints.made,
            swa_checkpoints_restored=checkpoints.restored,
            swa_checkpoint_bytes=checkpoints.nbytes,
            media_encoded=media_encoded,
            media_cache_hits=media_cache_hits,
            **(sched.host.figures() if sched.host is not None else {}),
        )
