"""What a caller asks of the engine and what it gets back: plain data, no llama.cpp."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmhost.engine.media import MediaSpan, kv_cells, text_ids
from llmhost.errors import BadRequestError, LlmhostError, UnavailableError

if TYPE_CHECKING:
    from llmhost.engine.config import EngineConfig


class FinishReason(enum.StrEnum):
    LENGTH = "length"  # max_tokens reached
    EOS = "eos_token"  # the model ended the sequence
    STOP = "stop_sequence"  # a stop string matched
    ABORT = "abort"  # the client went away or the request was cancelled
    ERROR = "error"  # the engine failed this request (and only this one)
    TIMEOUT = "timeout"  # the request's queue-wait or total deadline passed; its sequence was freed


class ConstraintKind(enum.StrEnum):
    JSON_SCHEMA = "json_schema"  # a JSON schema (OpenAI json_schema, TGI/llama-server json)
    JSON_OBJECT = "json_object"  # any JSON object (OpenAI json_object)
    REGEX = "regex"  # a regular expression the whole output matches (TGI regex)
    LARK = "lark"  # a Lark grammar (llguidance's grammar format)
    GBNF = "gbnf"  # a llama.cpp GBNF grammar (llama-server's `grammar`)


@dataclass(slots=True, frozen=True)
class Constraint:
    """What the output must follow; `value` is the schema (JSON text), regex or grammar text."""

    kind: ConstraintKind
    value: str
    # the request field it came from, named in errors
    field: str = "response_format"

    def __post_init__(self) -> None:
        if self.kind is not ConstraintKind.JSON_OBJECT and not self.value:
            raise ValueError(f"{self.field}: an empty {self.kind.value} constrains nothing")


@dataclass(slots=True, frozen=True)
class Thinking:
    """A thought the output may begin with, between the chat template's tags (as token ids): the tokens
    of its answer follow the constraint, and a budget closes it when spent."""

    start: tuple[int, ...]
    end: tuple[int, ...]
    opened: bool = False  # the prompt already opened the thought: the output starts inside it
    budget: int | None = None  # thought tokens (tags not counted) before the end tag is forced

    def __post_init__(self) -> None:
        if not self.start or not self.end:
            raise ValueError("a thought's start and end tags must be tokens")
        if self.budget is not None and self.budget < 0:
            raise ParamError("reasoning_budget", f"must be >= 0, got {self.budget}")


@dataclass(slots=True)
class SamplingParams:
    # 0: prefill only: the request ends right after its prompt is computed (scoring a prompt with
    # `prompt_logprobs`), nothing is sampled
    max_tokens: int = 16
    temperature: float = 1.0  # <= 0: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    logit_bias: dict[int, float] = field(default_factory=dict)
    logprobs: int | None = None  # return this many top alternatives per token (0: only the chosen)
    typical_p: float = 1.0  # locally typical sampling; 1: off
    constraint: Constraint | None = None  # structured output: the tokens must follow this grammar
    prompt_logprobs: bool = False  # also return the logprob of every prompt token after the first
    # control tokens written into the output text (a tool-call format's markers, such as Mistral's
    # `[TOOL_CALLS]`); other control tokens are left out of it
    render_special: frozenset[int] = frozenset()
    thinking: Thinking | None = None  # a thinking model's thought: counted, bounded, left unconstrained

    def __post_init__(self) -> None:
        if self.max_tokens < 0:
            raise ParamError("max_tokens", f"must be >= 0, got {self.max_tokens}")
        if self.temperature < 0:
            raise ParamError("temperature", f"must be >= 0, got {self.temperature}")
        if not 0 <= self.top_k <= INT32_MAX:
            raise ParamError("top_k", f"must be in [0, {INT32_MAX}], got {self.top_k}")
        if not 0 <= self.penalty_last_n <= INT32_MAX:
            raise ParamError("penalty_last_n", f"must be in [0, {INT32_MAX}], got {self.penalty_last_n}")
        for name in (
            "temperature",
            "top_p",
            "min_p",
            "typical_p",
            "repetition_penalty",
            "frequency_penalty",
            "presence_penalty",
        ):
            if not math.isfinite(getattr(self, name)):
                raise ParamError(name, f"must be a finite number, got {getattr(self, name)}")
        if not all(math.isfinite(v) or v == -math.inf for v in self.logit_bias.values()):
            raise ParamError("logit_bias", "values must be finite numbers (or -inf to ban a token)")
        if not 0.0 < self.top_p <= 1.0:
            raise ParamError("top_p", f"must be in (0, 1], got {self.top_p}")
        if not 0.0 < self.typical_p <= 1.0:
            raise ParamError("typical_p", f"must be in (0, 1], got {self.typical_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ParamError("min_p", f"must be in [0, 1], got {self.min_p}")
        if self.repetition_penalty <= 0:
            raise ParamError("repetition_penalty", f"must be > 0, got {self.repetition_penalty}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ParamError("logprobs", f"must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")

    @property
    def greedy(self) -> bool:
        # llama.cpp reads the temperature as a float32, where anything up to 2**-150 (2e-313 say) is 0
        return self.temperature <= 2.0**-150

    @property
    def penalized(self) -> bool:
        return self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0

    @property
    def plain_greedy(self) -> bool:
        """Greedy with no penalties: the next token is the argmax of the logits, whatever came before."""
        return (
            self.greedy
            and not self.penalized
            and self.constraint is None
            and (self.thinking is None or self.thinking.budget is None)
        )


MAX_LOGPROBS = 20
# the C type of llama.cpp's integer sampler settings
INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class GenerationRequest:
    request_id: str
    prompt_tokens: list[int]
    params: SamplingParams
    # seconds this request may wait for a sequence slot / run in all; None: the engine's defaults
    queue_timeout_s: float | None = None
    timeout_s: float | None = None
    # requests for the choices of one API request (`n` > 1): their prompt is prefilled once and shared
    group: str = ""
    # LoRA adapters (loaded with the engine) and their scales: lora.adapter_set form; (): the base model
    adapters: tuple[tuple[str, float], ...] = ()
    # admission order among waiting requests, lowest first (vLLM's `priority`): batch jobs run at
    # BATCH_PRIORITY, after every interactive request (0) waiting
    priority: int = 0
    # images and audio in the prompt: where each one's positions are (their ids in `prompt_tokens` are
    # synthetic, see engine.media) and what the projector made of it
    media: tuple[MediaSpan, ...] = ()

    @property
    def prompt_cells(self) -> int:
        """The KV cells the prompt fills (its positions, and an M-RoPE medium's embeddings beyond them)."""
        return kv_cells(len(self.prompt_tokens), self.media)


# the priority a batch job's requests run at unless a line sets its own: behind interactive traffic
BATCH_PRIORITY = 1


def check_token_ids(request: GenerationRequest, n_vocab: int) -> None:
    """Raise InvalidRequestError for the first token id outside the vocabulary, naming its field."""
    for field_name, ids in (
        ("prompt", text_ids(request.prompt_tokens) if request.media else request.prompt_tokens),
        ("logit_bias", request.params.logit_bias.keys()),
    ):
        for token in ids:
            if not 0 <= token < n_vocab:
                raise InvalidRequestError(
                    field_name, f"token id {token} is outside the vocabulary [0, {n_vocab})", n_vocab - 1
                )


@dataclass(slots=True, frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token, logprob) best first


def _rate(ms_per_token: float, per_second: float) -> str:
    return f"{ms_per_token:8.2f} ms per token, {per_second:8.2f} tokens per second"


@dataclass(slots=True)
class Timings:
    """Per-request timings in llama.cpp's print_timings words (milliseconds)."""

    queue_ms: float = 0.0  # submitted -> first prompt chunk scheduled
    prompt_n: int = 0  # prompt tokens actually prefilled
    cache_n: int = 0  # prompt tokens reused from the prefix cache
    prompt_ms: float = 0.0  # first prompt chunk -> first token sampled
    predicted_n: int = 0  # tokens generated
    predicted_ms: float = 0.0  # first token -> last token
    ttft_ms: float = 0.0  # submitted -> first token
    total_ms: float = 0.0  # submitted -> finished
    draft_n: int = 0  # speculative tokens proposed
    draft_n_accepted: int = 0  # of those, tokens the model confirmed
    encode_ms: float = 0.0  # running the projector's encoder on the prompt's media (cached ones: 0)

    @property
    def prompt_per_token_ms(self) -> float:
        return self.prompt_ms / self.prompt_n if self.prompt_n else 0.0

    @property
    def prompt_per_second(self) -> float:
        return 1000.0 * self.prompt_n / self.prompt_ms if self.prompt_ms > 0 else 0.0

    @property
    def predicted_per_token_ms(self) -> float:
        steps = self.predicted_n - 1
        return self.predicted_ms / steps if steps > 0 else 0.0

    @property
    def predicted_per_second(self) -> float:
        steps = self.predicted_n - 1
        return 1000.0 * steps / self.predicted_ms if self.predicted_ms > 0 and steps > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        """llama-server's `timings` object, plus queue and TTFT."""
        return {
            "prompt_n": self.prompt_n,
            "cache_n": self.cache_n,
            "prompt_ms": round(self.prompt_ms, 3),
            "prompt_per_token_ms": round(self.prompt_per_token_ms, 3),
            "prompt_per_second": round(self.prompt_per_second, 3),
            "predicted_n": self.predicted_n,
            "predicted_ms": round(self.predicted_ms, 3),
            "predicted_per_token_ms": round(self.predicted_per_token_ms, 3),
            "predicted_per_second": round(self.predicted_per_second, 3),
            "queue_ms": round(self.queue_ms, 3),
            "ttft_ms": round(self.ttft_ms, 3),
            "total_ms": round(self.total_ms, 3),
            "draft_n": self.draft_n,
            "draft_n_accepted": self.draft_n_accepted,
            "encode_ms": round(self.encode_ms, 3),
        }

    def print_timings(self) -> str:
        """The lines llama.cpp logs after each request."""
        prompt_rate = _rate(self.prompt_per_token_ms, self.prompt_per_second)
        eval_rate = _rate(self.predicted_per_token_ms, self.predicted_per_second)
        return (
            f"prompt eval time = {self.prompt_ms:10.2f} ms / {self.prompt_n:5d} tokens ({prompt_rate})\n"
            f"       eval time = {self.predicted_ms:10.2f} ms / {self.predicted_n:5d} tokens ({eval_rate})\n"
            f"      total time = {self.total_ms:10.2f} ms / {self.prompt_n + self.predicted_n:5d} tokens "
            f"(queue {self.queue_ms:.2f} ms, ttft {self.ttft_ms:.2f} ms, cached {self.cache_n} tokens)"
        )


@dataclass(slots=True)
class GenerationEvent:
    """One step's worth of output for a request; the last one has `finish_reason` set."""

    request_id: str
    token_ids: list[int]
    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    timings: Timings | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    # with `prompt_logprobs`: on the first event, the logprob of each prompt token after the first
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)
    # why an ERROR, ABORT or TIMEOUT happened, as a short label for metrics (e.g. "sampling", "queue")
    reason: str = ""
    # with finish_reason STOP: the stop string that matched (None when a grammar completed)
    stop_sequence: str | None = None
    # on the last event of a request with `thinking`: the output tokens of its thought (tags not counted)
    reasoning_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @classmethod
    def failure(cls, request_id: str, error: str, reason: str) -> GenerationEvent:
        """The last event of a request that failed before producing anything."""
        return cls(request_id, [], "", finish_reason=FinishReason.ERROR, error=error, reason=reason)


class ParamError(BadRequestError, ValueError):
    """A sampling parameter out of its range; names the request field (HTTP 422)."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name} {problem}")
        self.field_name = field_name


class EngineError(LlmhostError, RuntimeError):
    """The engine cannot serve a request. Its subclasses say why, each under the base of its status."""

    status = 503  # one that names no reason: the engine is not ready, as far as a client can tell


class QueueFullError(UnavailableError, EngineError):
    """Every sequence slot and queue place is taken; retry later (HTTP 429)."""

    status = 429

    def __init__(self, in_flight: int, limit: int) -> None:
        super().__init__(f"queue full: {in_flight} requests in flight, limit {limit}")
        self.in_flight = in_flight
        self.limit = limit


class EngineUnavailableError(UnavailableError, EngineError):
    """The engine is loading, failed or shutting down; retry later, elsewhere (HTTP 503)."""


class InvalidRequestError(BadRequestError, EngineError):
    """A request field the engine cannot use, e.g. a token id outside the vocabulary (HTTP 422)."""

    def __init__(self, field_name: str, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.field_name = field_name
        self.limit = limit


class RequestTooLargeError(BadRequestError, EngineError):
    """Prompt or prompt + max_tokens beyond the configured limits (HTTP 422). `limit_name`: the
    EngineConfig field of the limit exceeded (each API's routes write the refusal in their own field
    names, with the setting's flag); `n_prompt` and `max_tokens`: the request's two parts."""

    def __init__(
        self,
        field_name: str,
        value: int,
        limit: int,
        message: str,
        *,
        limit_name: str = "",
        n_prompt: int = 0,
        max_tokens: int = 0,
    ) -> None:
        super().__init__(message)
        self.field_name = field_name
        self.value = value
        self.limit = limit
        self.limit_name = limit_name
        self.n_prompt = n_prompt
        self.max_tokens = max_tokens


def check_limits(config: EngineConfig, n_prompt: int, max_tokens: int) -> None:
    """Raise RequestTooLargeError naming the field, both numbers and the limit's EngineConfig field."""
    if n_prompt == 0:
        raise RequestTooLargeError("prompt", 0, 1, "the prompt is empty: at least one token is needed")
    if n_prompt > config.max_input_tokens:
        raise RequestTooLargeError(
            "prompt",
            n_prompt,
            config.max_input_tokens,
            f"the prompt has {n_prompt} tokens; max_input_tokens is {config.max_input_tokens}",
            limit_name="max_input_tokens",
            n_prompt=n_prompt,
            max_tokens=max_tokens,
        )
    if n_prompt + max_tokens > config.max_total_tokens:
        raise RequestTooLargeError(
            "max_tokens",
            n_prompt + max_tokens,
            config.max_total_tokens,
            f"prompt tokens ({n_prompt}) + max_tokens ({max_tokens}) = {n_prompt + max_tokens} "
            f"exceeds max_total_tokens {config.max_total_tokens}",
            limit_name="max_total_tokens",
            n_prompt=n_prompt,
            max_tokens=max_tokens,
        )
