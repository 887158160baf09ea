"""Runs the embedder on its own thread and bridges it to asyncio.

That thread loads the model, then owns the embeddings context (llama.cpp contexts are not
thread-safe). Requests queue to it; the inputs of every queued request are packed into decodes in
arrival order, so concurrent requests share decodes rather than taking turns. llama_decode releases
the GIL, so the event loop keeps serving HTTP meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmhost.engine.embedder import (
    Embedder,
    EmbedderConfig,
    EmbeddingError,
    Vector,
    aligned,
    check_inputs,
    load_embedder,
)
from llmhost.engine.request import EngineUnavailableError, QueueFullError
from llmhost.engine.worker import EngineState, ModelWorker
from llmhost.errors import UnavailableError

log = logging.getLogger(__name__)


def _resolve(future: asyncio.Future[list[Vector]], outcome: list[Vector] | BaseException) -> None:
    if future.done():  # the caller stopped waiting
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


@dataclass(eq=False)
class _Job:
    """One request's inputs; every field but `cancelled` belongs to the worker thread."""

    inputs: list[list[int]]
    future: asyncio.Future[list[Vector]]
    loop: asyncio.AbstractEventLoop
    results: list[Vector] = field(default_factory=list)
    taken: int = 0  # inputs handed to a decode so far
    cancelled: bool = False  # the caller stopped waiting: the inputs not yet taken are skipped

    def settle(self, outcome: list[Vector] | BaseException) -> None:
        """Hand the outcome to the caller's event loop (one already closed has nobody to tell)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(_resolve, self.future, outcome)


class EmbedderDeadError(UnavailableError, RuntimeError):
    """Decodes kept failing; the process should be replaced."""


class AsyncEmbedder(ModelWorker[Embedder]):
    kind = "embedder"
    dead_error = EmbedderDeadError

    def __init__(
        self, model_path: str | Path, config: EmbedderConfig, load: Callable[[], Embedder] | None = None
    ) -> None:
        """`load` builds the Embedder on the worker thread; default: load `model_path` with llama.cpp."""
        super().__init__(load or (lambda: load_embedder(self.model_path, config)))
        self.model_path = str(model_path)
        self.config = config
        self._jobs: deque[_Job] = deque()  # accepted and not settled, oldest first

    @property
    def in_flight(self) -> int:
        return len(self._jobs)

    @property
    def n_embd(self) -> int:
        """Dimensions of every vector."""
        return self._require().model.n_embd

    @property
    def pooling(self) -> str:
        """How the model pools (mean, cls, last), or rank: a reranker, whose vectors are scores."""
        return self._require().model.pooling_name

    @property
    def score_labels(self) -> int:
        """A reranker's labels: 1, its score is a logit; more (Qwen3-Reranker's yes/no), llama.cpp
        softmaxes them and the score is the first one's probability."""
        return self._require().model.n_cls_out

    def pair_tokens(
        self, query: str, document: str, cut: bool, limit: int = 0, keep_end: bool = False
    ) -> list[int]:
        """A reranker's input for the pair, as llama-server writes it. Longer than `limit` (at most,
        and by default, max_input_tokens): the document cut to fit if `cut` (its end kept with
        `keep_end`), else PairTooLongError."""
        model = self._require().model
        most = self.config.max_input_tokens
        return model.pair_tokens(query, document, min(limit, most) if limit > 0 else most, cut, keep_end)

    # -- requests ------------------------------------------------------------------------------------
    async def embed(self, inputs: list[list[int]]) -> list[Vector]:
        """The pooled vectors of `inputs` (a reranker's: its scores), in order, as the model gives them.
        Raises RequestTooLargeError, InvalidRequestError or QueueFullError before anything is queued,
        EmbeddingError if its decode failed."""
        embedder = self._require()
        check_inputs(inputs, self.config, embedder.model.n_vocab)
        loop = asyncio.get_running_loop()
        job = _Job(inputs, loop.create_future(), loop)
        with self._cond:
            if self.state is not EngineState.READY:
                raise EngineUnavailableError(f"embedder is {self.state.value}")
            if len(self._jobs) >= self.config.max_requests:
                raise QueueFullError(len(self._jobs), self.config.max_requests)
            self._jobs.append(job)
            self._cond.notify()
        try:
            return await job.future
        except asyncio.CancelledError:
            job.cancelled = True
            raise

    # -- the worker thread ---------------------------------------------------------------------------
    def _serve(self, embedder: Embedder) -> None:
        try:
            self._run(embedder)
        finally:
            embedder.close()

    def _run(self, embedder: Embedder) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._jobs and self.state is EngineState.READY:
                    self._cond.wait()
                if self.state is not EngineState.READY:
                    break
                batch = self._take()
            if batch:
                failures = self._decode(embedder, batch, failures)
        self._fail_all(EngineUnavailableError("the server is shutting down"))

    @property
    def pack(self) -> int:
        """Tokens a decode is packed up to (see EmbedderConfig.pack_tokens), within what it holds."""
        return min(self.config.pack_tokens, self.config.decode_tokens)

    def _take(self) -> list[tuple[_Job, int]]:
        """The next decode's inputs, oldest request first (called holding the lock): up to `pack`
        tokens, and one input at least (check_inputs bounds it by what a decode holds); requests whose
        caller stopped waiting are dropped."""
        batch: list[tuple[_Job, int]] = []
        used = 0
        for job in list(self._jobs):
            if job.cancelled:
                self._jobs.remove(job)
                continue
            while job.taken < len(job.inputs):
                cost = aligned(len(job.inputs[job.taken]))
                if len(batch) == self.config.max_batch_inputs or (batch and used + cost > self.pack):
                    return batch
                batch.append((job, job.taken))
                job.taken += 1
                used += cost
        return batch

    def _decode(self, embedder: Embedder, batch: list[tuple[_Job, int]], failures: int) -> int:
        """One decode; returns the count of consecutive failed decodes, raising once it reaches the limit."""
        jobs = list(dict.fromkeys(job for job, _ in batch))
        try:
            vectors = embedder.embed([job.inputs[i] for job, i in batch])
        except Exception as exc:
            failures += 1
            log.exception(
                "embedding decode failed (%d in a row); failing its %d request(s)", failures, len(jobs)
            )
            self._settle(jobs, EmbeddingError(f"llama.cpp failed on this batch: {exc}"))
            if failures >= self.config.max_failures:
                raise EmbedderDeadError(f"{failures} embedding decodes in a row failed; last: {exc}") from exc
            return failures
        for (job, _), vector in zip(batch, vectors, strict=True):
            job.results.append(vector)  # inputs are taken in order, so they finish in order
        self._settle([job for job in jobs if len(job.results) == len(job.inputs)])
        return 0

    def _settle(self, jobs: list[_Job], error: BaseException | None = None) -> None:
        with self._cond:
            for job in jobs:
                self._jobs.remove(job)
        for job in jobs:
            job.settle(error if error is not None else job.results)

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            jobs = list(self._jobs)
        self._settle(jobs, error)

    def _die(self, reason: str) -> None:
        """Fail every accepted request at once and refuse new ones; the server exits on DEAD."""
        log.critical("%s; failing %d request(s)", reason, len(self._jobs))
        with self._cond:
            self.error = reason
            self.state = EngineState.DEAD
        self._fail_all(EngineUnavailableError(f"the embedder failed: {reason}"))


__all__ = ["AsyncEmbedder", "EmbedderDeadError"]
