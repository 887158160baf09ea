"""Runs the engine on its own thread and bridges it to asyncio.

llama_decode releases the GIL, so the event loop keeps serving HTTP while a step runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from llmhost.engine.config import EngineConfig
from llmhost.engine.drafter import Drafter
from llmhost.engine.engine import Engine
from llmhost.engine.kv.prefix_state import load_prefix_state
from llmhost.engine.llamacpp.adapters import AdapterStatus
from llmhost.engine.llamacpp.gguf_meta import ModelInfo
from llmhost.engine.llamacpp.model import LlamaModel, ModelLoadError
from llmhost.engine.lora import AdapterSpec
from llmhost.engine.media import MediaError, MediaInput, MediaKind, MediaLimits, MediaSpan
from llmhost.engine.request import (
    Constraint,
    EngineUnavailableError,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    InvalidRequestError,
    QueueFullError,
    check_limits,
    check_token_ids,
)
from llmhost.engine.stats import EngineObserver, EngineStats
from llmhost.engine.stream import RequestStream
from llmhost.engine.worker import EngineState, ModelWorker
from llmhost.errors import UnavailableError

log = logging.getLogger(__name__)
T = TypeVar("T")


def load_engine(model_path: str, config: EngineConfig, observer: EngineObserver | None = None) -> Engine:
    """The model (and draft model) loaded with llama.cpp, and a saved prefix state restored."""
    t0 = time.perf_counter()
    model = LlamaModel(model_path, config)
    config = model.config  # extra cached streams as many as its memory holds
    drafter = None
    if config.draft_model:
        # the target's streams exactly (sequence ids are shared), sized once: by the target
        unbounded = dataclasses.replace(config, memory_mb=0)
        drafter = Drafter(LlamaModel(config.draft_model, unbounded), model.n_vocab)
    engine = Engine(model, config, observer, drafter=drafter)
    # made here, in one thread: the server's checks and the engine thread both use it (it builds the
    # grammar vocabulary on the first structured request, not now)
    engine.constraints  # noqa: B018
    if config.prefix_state_path:
        _preload(engine, config.prefix_state_path)
    log.info("loaded %s in %.2f s", model_path, time.perf_counter() - t0)
    log.info(
        "KV cache: %d streams (%d running + %d extra cached) x %d tokens, %s/%s, %s, %.1f MiB "
        "(--prefix-cache-seqs, --max-total-tokens, --cache-type-k/-v and --swa-full size it)",
        config.n_seq_max,
        config.max_concurrent,
        config.prefix_cache_seqs,
        config.max_total_tokens,
        config.cache_type_k,
        config.cache_type_v,
        _window_handling(config, model),
        model.kv_mib,
    )
    return engine


def _window_handling(config: EngineConfig, model: LlamaModel) -> str:
    """What the start log says of sliding-window layers: in full (and why, where speculation asked for
    it), or at their window with the SWA checkpoints a sequence keeps and their shared byte budget."""
    if not model.swa_window:
        return "no sliding-window layers"
    if config.swa_full:
        return "sliding-window layers in full" + (" (speculation needs them)" if config.speculative else "")
    policy = model.checkpoints.policy
    budget = f" within {(policy.budget or 0) / 2**20:.1f} MiB" if policy.per_seq else ""
    return f"sliding-window layers at their window, {policy.per_seq} SWA checkpoints a sequence{budget}"


def _preload(engine: Engine, path: str) -> None:
    """Restore a saved prefix KV state; a state that does not fit is skipped, never fatal."""
    try:
        tokens, state = load_prefix_state(path)
        ok = engine.kv.preload_prefix(tokens, state)
    except (OSError, ValueError) as exc:
        log.warning("prefix state %s not loaded: %s", path, exc)
        return
    if ok:
        log.info("restored a cached prefix of %d tokens from %s", len(tokens), path)
    else:
        log.warning("prefix state %s (%d tokens) does not fit this engine; not used", path, len(tokens))


def _vetted(engine: Engine, vet: Callable[[ModelInfo], str | None] | None, path: str) -> Engine:
    fault = vet(engine.model.info) if vet is not None else None
    if fault is not None:
        engine.close()
        raise ModelLoadError(f"{path}: {fault}")
    return engine


def _run_calls(engine: Engine, calls: list[tuple[Callable[[Engine], Any], Future[Any]]]) -> None:
    for fn, future in calls:
        try:
            future.set_result(fn(engine))
        except Exception as exc:
            future.set_exception(exc)


class EngineDeadError(UnavailableError, RuntimeError):
    """The engine's steps kept failing; the process should be replaced."""


class AsyncEngine(ModelWorker[Engine]):
    kind = "engine"
    dead_error = EngineDeadError

    def __init__(
        self,
        model_path: str | Path,
        config: EngineConfig,
        observer: EngineObserver | None = None,
        load: Callable[[], Engine] | None = None,
        vet: Callable[[ModelInfo], str | None] | None = None,
    ):
        """`load` builds the Engine on the engine thread; default: load `model_path` with llama.cpp.
        `vet` says why a loaded model must not serve (None: it may), before it is ready."""
        build = load or (lambda: load_engine(self.model_path, config, observer))
        super().__init__(lambda: _vetted(build(), vet, self.model_path))
        self.model_path = str(model_path)
        self.config = config
        self.observer = observer
        self._inbox: list[tuple[GenerationRequest, RequestStream, float]] = []
        self._aborts: list[tuple[str, str]] = []
        # work for the engine thread between two steps (adapter loads and unloads), with its outcome
        self._calls: list[tuple[Callable[[Engine], Any], Future[Any]]] = []
        # every accepted request until its last event: what is failed if the engine dies
        self._streams: dict[str, RequestStream] = {}
        # where the engine's events go: each request the engine holds, from `_add` to its last event;
        # read and written on the engine thread only
        self._routes: dict[str, RequestStream] = {}

    def _die(self, reason: str) -> None:
        """Fail every accepted request at once and refuse new ones; the server exits on DEAD."""
        log.critical(
            "%s; failing %d request(s)%s",
            reason,
            len(self._streams),
            f": {', '.join(self._streams)}" if self._streams else "",
        )
        with self._cond:
            self.error = reason
            self.state = EngineState.DEAD
            streams, self._streams = list(self._streams.values()), {}
            self._inbox = []
            calls, self._calls = self._calls, []
        message = f"the engine failed: {reason}"
        for _, future in calls:
            future.set_exception(EngineDeadError(message))
        for stream in streams:
            stream.put(GenerationEvent.failure(stream.request_id, message, "engine_dead"))

    def _serve(self, engine: Engine) -> None:
        failures = 0
        while True:
            with self._cond:
                while not (self._inbox or self._aborts or self._calls or engine.has_work or not self.ready):
                    self._cond.wait()
                if self.state is not EngineState.READY:
                    break
                inbox, self._inbox = self._inbox, []
                aborts, self._aborts = self._aborts, []
                calls, self._calls = self._calls, []
            for request, stream, arrival in inbox:
                self._add(engine, request, stream, arrival)
            for request_id, reason in aborts:
                engine.abort(request_id, reason)
            if aborts:
                self._deliver(engine.take_events())
            _run_calls(engine, calls)
            failures = self._step(engine, failures)
        for _, future in self._calls:
            future.set_exception(EngineUnavailableError("the engine is shutting down"))
        engine.close()
        self._deliver(engine.take_events())

    def _add(self, engine: Engine, request: GenerationRequest, stream: RequestStream, arrival: float) -> None:
        """Hand one request to the engine; one it refuses fails alone."""
        try:
            engine.add(request, arrival)
        except Exception as exc:
            log.warning("request %s refused by the engine: %s", request.request_id, exc)
            self._put(stream, GenerationEvent.failure(request.request_id, str(exc), "invalid_request"))
            return
        self._routes[request.request_id] = stream

    def _step(self, engine: Engine, failures: int) -> int:
        """One step; returns the count of consecutive failed steps, raising once it reaches the limit."""
        try:
            events = engine.step()
        except Exception as exc:
            failures += 1
            log.exception("engine step failed (%d in a row)", failures)
            n = engine.recover()
            events = engine.take_events()
            self._deliver(events)
            failed = ", ".join(sorted({e.request_id for e in events if e.error is not None}))
            log.error(
                "failed the %d request(s) of that step%s; the others continue",
                n,
                f" (requests {failed})" if failed else "",
            )
            if failures >= self.config.max_step_failures:
                raise EngineDeadError(f"{failures} engine steps in a row failed; last: {exc}") from exc
            return failures
        self._deliver(events)
        return 0

    def _deliver(self, events: list[GenerationEvent]) -> None:
        """The engine's events, each to its request's stream; a request's last event ends its route."""
        routes = self._routes
        for event in events:
            if event.finished:
                self._put(routes.pop(event.request_id), event)
            else:
                routes[event.request_id].put(event)

    def _put(self, stream: RequestStream, event: GenerationEvent) -> None:
        if event.finished:
            with self._cond:
                self._streams.pop(stream.request_id, None)
        stream.put(event)

    # -- requests ------------------------------------------------------------------------------------
    @property
    def modalities(self) -> tuple[MediaKind, ...]:
        """The media the model takes besides text (its projector's): "image", "audio"; () before load."""
        engine = self._model
        projector = engine.model.projector if engine is not None else None
        return projector.modalities if projector is not None else ()

    def tokenize_media(
        self, text: str, media: list[MediaInput], limits: MediaLimits, add_special: bool = True
    ) -> tuple[list[int], tuple[MediaSpan, ...]]:
        """`text`'s tokens with a medium at each of its markers (see Projector.tokenize); MediaError for
        a medium that cannot be used, or any medium where the model takes text only. Any thread."""
        projector = self._require().model.projector
        if projector is None:
            raise MediaError(0, "this model takes text only: it was started without --mmproj")
        return projector.tokenize(text, media, limits, add_special)

    def media_marker(self) -> str:
        """The text that stands for a medium in a prompt (libmtmd's marker)."""
        projector = self._require().model.projector
        return projector.marker if projector is not None else ""

    def is_special(self, token: int) -> bool:
        return self._require().model.is_eog(token)

    def check_constraint(self, constraint: Constraint) -> None:
        """InvalidRequestError if the grammar cannot be used. Blocks (the first call waits for the
        vocabulary to be indexed): call it on a worker thread."""
        self._require().constraints.check(constraint)

    def check_capacity(self) -> None:
        """Raise QueueFullError if a request submitted now would be refused: cheap, so callers ask
        before tokenizing (submit checks again)."""
        self._require()
        limit = self.config.max_concurrent + self.config.max_queue
        if len(self._streams) >= limit:
            raise QueueFullError(len(self._streams), limit)

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Queue a request; raises QueueFullError, RequestTooLargeError or InvalidRequestError before
        anything is queued."""
        engine = self._require()
        check_limits(self.config, request.prompt_cells, request.params.max_tokens)
        check_token_ids(request, engine.model.n_vocab)
        stream = RequestStream(self.abort, request.request_id)
        limit = self.config.max_concurrent + self.config.max_queue
        with self._cond:
            if self.state is not EngineState.READY:
                raise EngineUnavailableError(f"engine is {self.state.value}")
            if len(self._streams) >= limit:
                raise QueueFullError(len(self._streams), limit)
            if request.request_id in self._streams:
                raise InvalidRequestError("request_id", f"request id {request.request_id} is in use")
            self._streams[request.request_id] = stream
            self._inbox.append((request, stream, time.perf_counter()))
            self._cond.notify()
        return stream

    def call(self, fn: Callable[[Engine], T]) -> Future[T]:
        """Run `fn` on the engine thread between two steps: its result (or exception) in the future."""
        self._require()
        future: Future[T] = Future()
        with self._cond:
            if self.state is not EngineState.READY:
                raise EngineUnavailableError(f"engine is {self.state.value}")
            self._calls.append((fn, future))
            self._cond.notify()
        return future

    # -- LoRA adapters at run time (between steps, on the engine thread) ----------------------------------
    async def load_adapter(self, spec: AdapterSpec) -> bool:
        """Load an adapter (False: it was loaded already); ModelLoadError if the model refuses it,
        AdapterConflictError if another file has its name."""
        return await asyncio.wrap_future(self.call(lambda e: e.adapters.load(spec, set(e.adapters_in_use()))))

    async def unload_adapter(self, name: str) -> None:
        """KeyError for an unknown name; AdapterInUseError while requests run or wait with it."""
        await asyncio.wrap_future(self.call(lambda e: e.adapters.unload(name, set(e.adapters_in_use()))))

    async def adapter_status(self) -> list[AdapterStatus]:
        return await asyncio.wrap_future(self.call(lambda e: e.adapters.status(e.adapters_in_use())))

    def abort(self, request_id: str, reason: str = "client") -> None:
        with self._cond:
            self._aborts.append((request_id, reason))
            self._cond.notify()

    def cut(self, message: str) -> int:
        """End every accepted request now with a failure event (a drain's grace period is over): each
        client hears `message` in its API's error event before its connection closes, and the engine
        frees their sequences. Returns how many were cut. Call on the event loop."""
        with self._cond:
            streams, self._streams = list(self._streams.values()), {}
            self._aborts.extend((s.request_id, "shutdown") for s in streams)
            self._cond.notify()
        for stream in streams:  # queued before the engine's own abort event, which nobody reads then
            stream.put(GenerationEvent.failure(stream.request_id, message, "shutdown"))
        return len(streams)

    def stats(self) -> EngineStats | None:
        """The figures the engine thread published after its last step (never read mid-step)."""
        return self._model.snapshot if self._model is not None else None

    def slow_step(self) -> tuple[float, str] | None:
        """(seconds, what it holds) of a step running longer than `slow_step_s`, else None."""
        engine = self._model
        if engine is None or self.state is not EngineState.READY:
            return None
        running = time.perf_counter() - engine.step_started_s
        if not engine.stepping or running < self.config.slow_step_s:
            return None
        return running, engine.describe_step()

    @property
    def in_flight(self) -> int:
        return len(self._streams)


__all__ = ["AsyncEngine", "EngineDeadError", "EngineState", "FinishReason", "RequestStream"]
