"""Runs the engine on its own thread and bridges it to asyncio.

llama_decode releases the GIL, so the event loop keeps serving HTTP while a step runs.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from llmhost.engine.config import EngineConfig
from llmhost.engine.drafter import Drafter
from llmhost.engine.engine import Engine, EngineObserver, EngineStats, check_limits
from llmhost.engine.llama import LlamaModel, ModelInfo
from llmhost.engine.prefix_state import load_prefix_state
from llmhost.engine.request import (
    EngineError,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    QueueFullError,
)

log = logging.getLogger(__name__)


class EngineState(enum.Enum):
    LOADING = "loading"  # model file being read, context being created
    READY = "ready"  # serving requests
    FAILED = "failed"  # load failed; `error` says why
    STOPPED = "stopped"  # shut down


class RequestStream:
    """Events of one request, in order; closing it early aborts the request."""

    def __init__(self, owner: AsyncEngine, request_id: str) -> None:
        self.request_id = request_id
        self._owner = owner
        self._queue: asyncio.Queue[GenerationEvent] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._done = False

    def _put(self, event: GenerationEvent) -> None:  # engine thread
        self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[GenerationEvent]:
        try:
            while True:
                event = await self._queue.get()
                if event.finished:
                    self._done = True
                yield event
                if self._done:
                    return
        finally:
            if not self._done:
                self.abort()

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._owner.abort(self.request_id)

    async def collect(self) -> list[GenerationEvent]:
        return [event async for event in self]


class AsyncEngine:
    def __init__(self, model_path: str | Path, config: EngineConfig, observer: EngineObserver | None = None):
        self.model_path = str(model_path)
        self.config = config
        self.observer = observer
        self.state = EngineState.LOADING
        self.error: str | None = None
        self._engine: Engine | None = None
        self._cond = threading.Condition()
        self._inbox: list[tuple[GenerationRequest, RequestStream, float]] = []
        self._aborts: list[str] = []
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Load the model and start stepping, on a background thread."""
        self._thread = threading.Thread(target=self._main, name="llmhost-engine", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        self._loaded.wait(timeout)
        return self.state is EngineState.READY

    @property
    def ready(self) -> bool:
        return self.state is EngineState.READY

    @property
    def info(self) -> ModelInfo:
        return self._require().model.info

    def _require(self) -> Engine:
        if self._engine is None or self.state is not EngineState.READY:
            raise EngineError(f"engine is {self.state.value}" + (f": {self.error}" if self.error else ""))
        return self._engine

    def _main(self) -> None:
        try:
            t0 = time.perf_counter()
            model = LlamaModel(self.model_path, self.config)
            drafter = None
            if self.config.draft_model:
                drafter = Drafter(LlamaModel(self.config.draft_model, self.config), model.n_vocab)
            self._engine = Engine(model, self.config, self.observer, drafter=drafter)
            if self.config.prefix_state_path:
                self._preload(self._engine, self.config.prefix_state_path)
            log.info("loaded %s in %.2f s", self.model_path, time.perf_counter() - t0)
            self.state = EngineState.READY
        except Exception as exc:
            self.error = str(exc)
            self.state = EngineState.FAILED
            log.error("model load failed: %s", exc)
            return
        finally:
            self._loaded.set()
        self._run()

    @staticmethod
    def _preload(engine: Engine, path: str) -> None:
        """Restore a saved prefix KV state; a state that does not fit is skipped, never fatal."""
        try:
            tokens, state = load_prefix_state(path)
            ok = engine.preload_prefix(tokens, state)
        except (OSError, ValueError) as exc:
            log.warning("prefix state %s not loaded: %s", path, exc)
            return
        if ok:
            log.info("restored a cached prefix of %d tokens from %s", len(tokens), path)
        else:
            log.warning("prefix state %s (%d tokens) does not fit this engine; not used", path, len(tokens))

    def _run(self) -> None:
        engine = self._engine
        assert engine is not None
        while True:
            with self._cond:
                while not (
                    self._inbox or self._aborts or engine.has_work or self.state is EngineState.STOPPED
                ):
                    self._cond.wait()
                if self.state is EngineState.STOPPED:
                    break
                inbox, self._inbox = self._inbox, []
                aborts, self._aborts = self._aborts, []
            for request, stream, arrival in inbox:
                engine.add(request, self._emitter(stream), arrival)
            for request_id in aborts:
                engine.abort(request_id)
            try:
                engine.step()
            except Exception:  # a bug must not kill the serving thread silently
                log.exception("engine step failed; failing running requests")
                for seq in list(engine.scheduler.running) + list(engine.scheduler.waiting):
                    engine._fail(seq, "internal engine error")
        engine.close()

    def _emitter(self, stream: RequestStream) -> Callable[[GenerationEvent], None]:
        def emit(event: GenerationEvent) -> None:
            if event.finished:
                with self._cond:
                    self._in_flight -= 1
            stream._put(event)

        return emit

    def shutdown(self) -> None:
        with self._cond:
            self.state = EngineState.STOPPED
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # -- requests ------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self._require().model.tokenize(text, add_special=add_special)

    def detokenize(self, tokens: list[int]) -> str:
        return self._require().model.detokenize(tokens)

    def token_text(self, token: int) -> str:
        return self._require().model.piece(token, special=True).decode("utf-8", "replace")

    def is_special(self, token: int) -> bool:
        return self._require().model.is_eog(token)

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Queue a request; raises QueueFullError or RequestTooLargeError before anything is queued."""
        self._require()
        check_limits(self.config, len(request.prompt_tokens), request.params.max_tokens)
        stream = RequestStream(self, request.request_id)
        limit = self.config.max_concurrent + self.config.max_queue
        with self._cond:
            if self._in_flight >= limit:
                raise QueueFullError(self._in_flight, limit)
            self._in_flight += 1
            self._inbox.append((request, stream, time.perf_counter()))
            self._cond.notify()
        return stream

    def abort(self, request_id: str) -> None:
        with self._cond:
            self._aborts.append(request_id)
            self._cond.notify()

    def stats(self) -> EngineStats | None:
        return self._engine.stats() if self._engine is not None else None

    @property
    def in_flight(self) -> int:
        return self._in_flight


__all__ = ["AsyncEngine", "EngineState", "FinishReason", "RequestStream"]
