"""A replica's span of an inference request, in OpenTelemetry's GenAI terms, whatever its API: the
serving context reports what the request asked (`submitted`: every API's requests reach the engine
there; `embedded`: every embeddings and rerank request), the engine its end (`InferenceTracing` is the
engine's observer, beside the metrics), and the span says it once the response is sent
(`llmhost.web.traces.TraceMiddleware`).

Each hook is a context-variable read where tracing is off: no span, no OpenTelemetry."""

from __future__ import annotations

from collections.abc import Mapping

from llmhost.engine.request import FinishReason, GenerationEvent, GenerationRequest
from llmhost.engine.stats import EngineObserver
from llmhost.web.traces import AttrValue, current

CHAT = "chat"
TEXT_COMPLETION = "text_completion"
EMBEDDINGS = "embeddings"
RERANK = "rerank"  # no GenAI operation names it: llmhost's own word
# the GenAI conventions' finish reasons are the provider's words: OpenAI's, as llmhost's APIs answer
_FINISH = {FinishReason.EOS: "stop", FinishReason.STOP: "stop"}


class InferenceSpan:
    """What one inference request's span says (a `SpanDetail`): its operation and what it asked, and
    once the engine let go of its requests (a request's `n` choices are one each) what they took."""

    def __init__(self, served_model: str) -> None:
        self.served_model = served_model  # the model of a request that names none (TGI's)
        self.operation = ""
        self.model = ""
        self.max_tokens: int | None = None
        self.temperature: float | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.finish_reasons: list[str] = []
        self.queue_s: float | None = None
        self.ttft_s: float | None = None
        self._prompt_of: dict[str, str] = {}  # engine request id -> its prompt (choices share one)
        self._counted: set[str] = set()  # prompts whose tokens are counted

    def name(self) -> str | None:
        """`{operation} {model}`, as the GenAI conventions name a span; None: no inference was asked."""
        return f"{self.operation} {self.model or self.served_model}" if self.operation else None

    def submitted(self, request: GenerationRequest) -> None:
        if not self.operation:
            self.operation = TEXT_COMPLETION
        if not self._prompt_of:  # the choices of a request sample alike
            self.max_tokens = request.params.max_tokens
            self.temperature = request.params.temperature
        self._prompt_of[request.request_id] = request.group or request.request_id

    def finished(self, event: GenerationEvent) -> None:
        """One engine request's last event (called on the engine's thread)."""
        prompt = self._prompt_of.get(event.request_id, event.request_id)
        t = event.timings
        if prompt not in self._counted:
            self._counted.add(prompt)
            self.input_tokens += event.prompt_tokens
            self.cached_tokens += t.cache_n if t is not None else 0
        self.output_tokens += event.completion_tokens
        finish = event.finish_reason
        self.finish_reasons.append(_FINISH.get(finish, finish.value) if finish else "unknown")
        if t is None:
            return
        self.queue_s = _least(self.queue_s, t.queue_ms / 1000)
        if t.predicted_n:
            self.ttft_s = _least(self.ttft_s, t.ttft_ms / 1000)

    def embedded(self, operation: str, n_tokens: int) -> None:
        self.operation = operation
        self.input_tokens += n_tokens

    def attributes(self) -> Mapping[str, AttrValue]:
        attrs: dict[str, AttrValue] = {
            "gen_ai.operation.name": self.operation,
            "gen_ai.request.model": self.model or self.served_model,
            "gen_ai.usage.input_tokens": self.input_tokens,
        }
        if self.operation in (EMBEDDINGS, RERANK):
            return attrs
        optional: dict[str, AttrValue | None] = {
            "gen_ai.request.max_tokens": self.max_tokens,
            "gen_ai.request.temperature": self.temperature,
            "gen_ai.usage.output_tokens": self.output_tokens,
            "gen_ai.response.finish_reasons": tuple(self.finish_reasons) or None,
            "llmhost.usage.cached_tokens": self.cached_tokens,
            "llmhost.queue_time_s": self.queue_s,
            "llmhost.time_to_first_token_s": self.ttft_s,
        }
        return attrs | {k: v for k, v in optional.items() if v is not None}


def _least(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _span(served_model: str) -> InferenceSpan | None:
    """The current request's inference span, made on its first use (`served_model`: the model of this
    server); None where tracing is off."""
    trace = current()
    if trace is None:
        return None
    if not isinstance(trace.detail, InferenceSpan):
        trace.detail = InferenceSpan(served_model)
    return trace.detail


def requested(model: str | None, served_model: str) -> None:
    """The model the request names (its `model`), where its API has one."""
    span = _span(served_model)
    if span is not None and model:
        span.model = model


def chat(served_model: str) -> None:
    """The request is a conversation (rendered with the chat template)."""
    span = _span(served_model)
    if span is not None:
        span.operation = CHAT


def embedded(operation: str, n_tokens: int, served_model: str) -> None:
    """An embeddings (or rerank) request, of `n_tokens` input tokens."""
    span = _span(served_model)
    if span is not None:
        span.embedded(operation, n_tokens)


class InferenceTracing:
    """The engine's observer: the metrics' (`metrics`), and each request's end told to the span of the
    HTTP request that submitted it."""

    def __init__(self, metrics: EngineObserver, served_model: str) -> None:
        self.metrics = metrics
        self.served_model = served_model
        # engine request id -> its span, from its submission to its last event (the engine's thread
        # takes it out: dict operations are atomic)
        self._open: dict[str, InferenceSpan] = {}

    def submitted(self, request: GenerationRequest) -> None:
        """Called before the engine has it: its last event may come at once."""
        span = _span(self.served_model)
        if span is None:  # not from an HTTP request (nothing to tell)
            return
        span.submitted(request)
        self._open[request.request_id] = span

    def refused(self, request_id: str) -> None:
        self._open.pop(request_id, None)

    def on_step(self, num_seqs: int, num_tokens: int, seconds: float) -> None:
        self.metrics.on_step(num_seqs, num_tokens, seconds)

    def on_finish(self, event: GenerationEvent) -> None:
        self.metrics.on_finish(event)
        span = self._open.pop(event.request_id, None)
        if span is not None:
            span.finished(event)
