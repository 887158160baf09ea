"""Output processing, apart from the step: sampled tokens -> text deltas, stop/EOS/length checks,
and each request's timings. Pure Python over plain data; the engine calls it after each decode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llmhost.engine.request import FinishReason, SamplingParams, Timings, TokenLogprob
from llmhost.engine.sample.sampling import Sampler
from llmhost.engine.sched.sequence import Sequence
from llmhost.engine.text import IncrementalDetokenizer


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
        cache_n=seq.n_reused,
        predicted_n=len(seq.output),
        draft_n=seq.draft_n,
        draft_n_accepted=seq.draft_accepted,
    )
    if seq.admitted_s:
        t.queue_ms = 1000 * (seq.admitted_s - seq.arrival_s)
        t.prompt_n = min(seq.n_computed, len(seq.prompt)) - seq.n_reused
    else:
        t.queue_ms = 1000 * (end_s - seq.arrival_s)
    if seq.first_token_s:
        t.prompt_ms = 1000 * (seq.first_token_s - seq.admitted_s)
        t.predicted_ms = 1000 * (seq.last_token_s - seq.first_token_s)
        t.ttft_ms = 1000 * (seq.first_token_s - seq.arrival_s)
    t.total_ms = 1000 * (end_s - seq.arrival_s)
    return t
