"""A request as the scheduler sees it."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from llmhost.engine.config import EngineConfig
from llmhost.engine.media import MediaSpan
from llmhost.engine.request import GenerationRequest
from llmhost.engine.sample.speculative import DraftLength, NgramIndex


class SeqStatus(enum.Enum):
    WAITING = "waiting"  # queued; holds no KV sequence yet
    PREFILL = "prefill"  # holds a KV sequence; prompt partly computed
    DECODE = "decode"  # prompt computed; one new token per step
    FINISHED = "finished"  # done; its KV went to the prefix cache or was dropped


@dataclass(slots=True, eq=False)
class Sequence:
    request_id: str
    prompt: list[int]
    max_tokens: int
    arrival_s: float
    # sequences of one request with several choices share a group: they compute the prompt once
    group: str = ""
    # the LoRA adapter set its tokens are computed with (lora.AdapterSet; (): the base model)
    adapters: tuple[tuple[str, float], ...] = ()
    # admission order, lowest first, before the schedule policy's rank (GenerationRequest.priority)
    priority: int = 0
    # admissions that went to a later sequence with less prompt left to compute (bounded: see scheduler)
    passed_over: int = 0
    # the logits of every prompt position are needed (prompt logprobs): no prefix reuse
    prompt_logprobs: bool = False
    status: SeqStatus = SeqStatus.WAITING
    kv_seq: int = -1
    # tokens of prompt + output whose KV is computed
    n_computed: int = 0
    # prompt tokens taken from the prefix cache instead of prefilled
    n_reused: int = 0
    # those tokens were restored from host memory (not shared within the context)
    restored: bool = False
    output: list[int] = field(default_factory=list)
    admitted_s: float = 0.0
    # absolute clock times after which the request is dropped: still waiting / at all (inf: never)
    queue_deadline_s: float = float("inf")
    deadline_s: float = float("inf")
    first_token_s: float = 0.0
    last_token_s: float = 0.0
    # speculative decoding: n-grams of prompt + output, and what the drafts achieved
    ngrams: NgramIndex | None = None
    # n-gram speculation with an adaptive length: how many guesses it verifies next (None: fixed)
    draft_length: DraftLength | None = None
    # draft-model speculation: this sequence speculates, and how many of its tokens the draft's KV holds
    drafted: bool = False
    draft_pos: int = 0
    draft_n: int = 0
    draft_accepted: int = 0
    # images and audio in the prompt (see engine.media), and the seconds their encoding took
    media: tuple[MediaSpan, ...] = ()
    encode_s: float = 0.0

    @property
    def finished(self) -> bool:
        return self.status is SeqStatus.FINISHED

    @property
    def prefilled_only(self) -> bool:
        """Nothing is to be generated (max_tokens 0) and the prompt is computed: the request is done."""
        return self.max_tokens == 0 and self.n_computed >= len(self.prompt)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def computed_tokens(self) -> list[int]:
        """The tokens whose KV this sequence's llama.cpp sequence holds."""
        n = self.n_computed
        if n <= len(self.prompt):
            return self.prompt[:n]
        return self.prompt + self.output[: n - len(self.prompt)]


def new_sequence(
    request: GenerationRequest, config: EngineConfig, arrival_s: float, draft_model: bool
) -> Sequence:
    """The sequence of a request arriving at `arrival_s`, with its deadlines and, for a plain greedy one
    (verification compares argmaxes), its speculation: by the draft model if there is one, else by
    n-grams when the engine speculates so."""
    seq = Sequence(
        request_id=request.request_id,
        prompt=list(request.prompt_tokens),
        max_tokens=request.params.max_tokens,
        arrival_s=arrival_s,
        group=request.group,
        adapters=request.adapters,
        priority=request.priority,
        prompt_logprobs=request.params.prompt_logprobs,
        queue_deadline_s=_deadline(arrival_s, request.queue_timeout_s, config.queue_timeout_s),
        deadline_s=_deadline(arrival_s, request.timeout_s, config.request_timeout_s),
        media=request.media,
    )
    # no speculation over media: a draft model would need them too, and n-grams would guess ids of them
    if not request.params.plain_greedy or request.media:
        return seq
    if draft_model:
        seq.drafted = True
    elif config.speculative == "ngram":
        seq.ngrams = NgramIndex(config.ngram_size)
        seq.ngrams.extend(seq.prompt)
        if config.adaptive_draft:
            seq.draft_length = DraftLength(config.draft_tokens)
    return seq


def _deadline(start: float, *timeouts: float | None) -> float:
    """`start` + the first timeout set (None or 0: unset); inf when none is."""
    for t in timeouts:
        if t:
            return start + t
    return math.inf
