"""The load generator: closed loop (N users, each sending its next request when the last one ended)
and open loop (arrivals at a rate: Poisson, or gamma-distributed gaps with a burstiness factor, see
:mod:`llmhost.bench.load.arrivals`), over keep-alive connections of an aiohttp session
(:mod:`llmhost.bench.load.http`).

A request never raises: every failure becomes a :class:`RequestRecord` with an error kind. A level
ends when its duration or request count is reached (requests in flight are completed, bounded by the
per-request timeout), or early when the error rate passes its bound. The retrieval workloads'
requests (:mod:`llmhost.bench.load.retrieval`) get one JSON answer instead of a stream.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from llmhost.bench.figures import metrics as m
from llmhost.bench.load.arrivals import Arrivals
from llmhost.bench.load.http import HttpClientError, HttpRequest, classify, new_session, read_body, send
from llmhost.bench.load.retrieval import AnswerError, RetrievalTarget
from llmhost.bench.load.slostop import STOPPED as SLO_MISSED
from llmhost.bench.load.slostop import SloStop, SloWatch
from llmhost.bench.load.sse import SSEDecoder
from llmhost.bench.load.targets import StreamError, StreamState, Target


@dataclass(frozen=True)
class PreparedRequest:
    """A request built once, sent many times."""

    http: HttpRequest
    prompt_tokens: int
    model: str | None = None  # in a mix of models (or components): the one it names
    items: int = 0  # embed / rerank: the inputs or documents it carries
    images: int = 0  # --images: the images it carries


AnyTarget = Target | RetrievalTarget  # a streamed generation, or a retrieval route's one JSON answer


@dataclass(frozen=True)
class LoadSettings:
    duration_s: float | None = None  # measured phase length; in-flight requests still complete
    requests: int | None = None  # or a request count per level (whichever comes first)
    warmup: int = 0  # requests per level sent before measuring, excluded from figures
    timeout_s: float = 120.0  # per request, connect to last byte
    max_error_rate: float | None = 0.5  # stop the level (and the run) above this fraction
    min_requests_for_error_rate: int = 10
    max_in_flight: int = 1024  # open loop: arrivals wait beyond this many requests in flight
    seed: int = 0
    burstiness: float = 1.0  # open loop: gamma shape of the inter-arrival gaps (1.0: Poisson)
    slo_stop: SloStop | None = None  # stop the level once it cannot meet this SLO (bench.load.slostop)

    def __post_init__(self) -> None:
        if self.duration_s is None and self.requests is None:
            raise ValueError("give a duration or a request count")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError("duration must be positive")
        if self.requests is not None and self.requests < 1:
            raise ValueError("requests must be at least 1")
        if self.timeout_s <= 0:
            raise ValueError("timeout must be positive")
        if self.burstiness <= 0:
            raise ValueError("burstiness must be positive (1.0: Poisson arrivals)")
        if self.slo_stop is not None and self.slo_stop.requests != self.requests:
            raise ValueError("an SLO stop is judged over the level's request count")


class LevelState:
    """Live counters of the level being run (read by progress displays)."""

    __slots__ = (
        "config",
        "done",
        "duration_s",
        "errors",
        "level",
        "ok",
        "output_tokens",
        "started_at",
        "stop",
        "stop_detail",
        "stopped",
        "target_requests",
        "warmup",
    )

    def __init__(self, config: str, level: str, settings: LoadSettings) -> None:
        self.config = config
        self.level = level
        self.done = 0
        self.ok = 0
        self.errors = 0
        self.output_tokens = 0
        self.started_at = time.perf_counter()
        self.stop = False
        self.stopped: str | None = None
        self.stop_detail: str | None = None
        self.target_requests = settings.requests
        self.duration_s = settings.duration_s
        self.warmup = False


Sink = Callable[[m.RequestRecord], None]


async def send_one(
    session: aiohttp.ClientSession,
    target: AnyTarget,
    prep: PreparedRequest,
    rec: m.RequestRecord,
    run_t0: float,
) -> StreamState | None:
    """Send one request through ``session`` and fill ``rec``; never raises (except on cancellation).
    Returns what the answer's stream said when it succeeded (its text, for a conversation's next turn);
    a retrieval answer is no stream: None."""
    t0 = time.perf_counter()
    rec.start_s = t0 - run_t0
    rec.prompt_tokens, rec.model, rec.images = prep.prompt_tokens, prep.model, prep.images
    try:
        async with send(session, prep.http) as resp:
            rec.status = resp.status
            if resp.status != 200:
                body = await read_body(resp, 2048)
                rec.e2e_s = time.perf_counter() - t0
                rec.error = m.error_kind_for_status(resp.status)
                rec.error_detail = body[:300].decode("utf-8", "replace")
                return None
            if isinstance(target, RetrievalTarget):
                await _read_answer(resp, target, prep, rec, t0)
                return None
            return await _read_stream(resp, target, rec, t0)
    except HttpClientError as exc:
        rec.error = m.MALFORMED_STREAM if exc.kind == "malformed_response" else exc.kind
        rec.error_detail = exc.detail
        rec.e2e_s = time.perf_counter() - t0
    except (StreamError, AnswerError) as exc:
        rec.error = exc.kind
        rec.error_detail = exc.detail
        rec.e2e_s = time.perf_counter() - t0
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a benchmark never crashes on one bad answer
        rec.error = m.OTHER
        rec.error_detail = f"{type(exc).__name__}: {exc}"
        rec.e2e_s = time.perf_counter() - t0
    return None


async def _read_stream(
    resp: aiohttp.ClientResponse, target: Target, rec: m.RequestRecord, t0: float
) -> StreamState:
    stream = target.new_stream()
    decoder = SSEDecoder()
    # arrival of each event carrying generated text, however many tokens it holds (one ITL gap
    # per event, as vLLM); events of one network read share the time that read returned
    token_times: list[float] = []
    feed = stream.feed
    try:
        async for chunk in resp.content.iter_any():
            now = time.perf_counter()
            for payload in decoder.feed(chunk):
                if feed(payload):
                    token_times.append(now - t0)
                    if rec.answer_ttft_s is None and stream.answered:
                        rec.answer_ttft_s = now - t0
            if rec.ttft_s is None and token_times:
                rec.ttft_s = token_times[0]  # known before the end: see bench.load.slostop
    except (aiohttp.ClientError, OSError) as exc:
        raise classify(exc) from exc
    end = time.perf_counter()
    for payload in decoder.finish():
        if feed(payload):
            token_times.append(end - t0)
            if rec.answer_ttft_s is None and stream.answered:
                rec.answer_ttft_s = end - t0
    stream.check_complete()
    if not token_times:
        raise StreamError(m.MALFORMED_STREAM, "stream carried no generated token")
    rec.finish_ok(token_times, end - t0, stream.output_tokens)
    rec.tokens_counted_by = stream.counted_by
    rec.reasoning_tokens = stream.reasoning_tokens
    rec.encode_ms = stream.encode_ms
    if stream.reported_prompt_tokens is not None:
        rec.prompt_tokens = stream.reported_prompt_tokens
    return stream


async def _read_answer(
    resp: aiohttp.ClientResponse,
    target: RetrievalTarget,
    prep: PreparedRequest,
    rec: m.RequestRecord,
    t0: float,
) -> None:
    raw = await read_body(resp, 1 << 30)  # 64 vectors of 1,024 floats are ~1.3 MB of JSON: keep it all
    end = time.perf_counter()
    answer = target.read(raw, prep.items)
    rec.finish_answer(end - t0, answer.items)
    if answer.prompt_tokens is not None:
        rec.prompt_tokens = answer.prompt_tokens


async def send_with_timeout(
    session: aiohttp.ClientSession,
    target: AnyTarget,
    prep: PreparedRequest,
    rec: m.RequestRecord,
    run_t0: float,
    timeout_s: float,
) -> StreamState | None:
    try:
        return await asyncio.wait_for(send_one(session, target, prep, rec, run_t0), timeout_s)
    except TimeoutError:
        rec.ok = False
        rec.error = m.TIMEOUT
        rec.error_detail = f"no complete answer within {timeout_s:g} s"
        rec.e2e_s = timeout_s
        return None


class Phase:
    """Shared bookkeeping of one phase (warm-up or measured) of a level."""

    def __init__(
        self,
        state: LevelState,
        settings: LoadSettings,
        sink: Sink,
        warmup: bool,
        count: int | None,
        duration_s: float | None,
        first_index: int = 0,
    ) -> None:
        self.state = state
        # the measured phase continues after the warm-up prompts, so none is sent twice
        self.first_index = first_index
        self.settings = settings
        self.sink = sink
        self.warmup = warmup
        self.count = count
        self.issued = 0
        self.deadline = time.perf_counter() + duration_s if duration_s is not None else None
        stop = settings.slo_stop
        self.watch = SloWatch(stop) if stop is not None and not warmup else None
        self.in_flight: dict[int, tuple[m.RequestRecord, float]] = {}  # id → (record, sent at)

    def take(self) -> int | None:
        """Index of the next request to send, or ``None`` when the phase is over."""
        if self.state.stop:
            return None
        if self.count is not None and self.issued >= self.count:
            return None
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            return None
        self.issued += 1
        return self.first_index + self.issued - 1

    def begin(self, rec: m.RequestRecord) -> None:
        if self.watch is not None:  # only an SLO stop looks at the requests in flight
            self.in_flight[id(rec)] = (rec, time.perf_counter())

    def check_waiting(self) -> None:
        """Count the requests in flight that have waited past the TTFT bound (see bench.load.slostop)."""
        if self.watch is None:
            return
        now = time.perf_counter()
        for rec, sent in list(self.in_flight.values()):
            self._slo_verdict(self.watch.waiting(rec, now - sent))

    def _slo_verdict(self, why: str | None) -> None:
        st = self.state
        if why is not None and not st.stop:
            st.stop, st.stopped, st.stop_detail = True, SLO_MISSED, why

    def record(self, rec: m.RequestRecord) -> None:
        self.in_flight.pop(id(rec), None)
        self.sink(rec)
        if self.warmup:
            return
        if self.watch is not None:
            self._slo_verdict(self.watch.finished(rec))
        st = self.state
        st.done += 1
        if rec.ok:
            st.ok += 1
            st.output_tokens += rec.output_tokens
        else:
            st.errors += 1
            bound = self.settings.max_error_rate
            if (
                bound is not None
                and st.done >= self.settings.min_requests_for_error_rate
                and st.errors / st.done > bound
                and not st.stop
            ):
                st.stop = True
                st.stopped = "error_rate"


async def run_closed_phase(
    session: aiohttp.ClientSession,
    target: AnyTarget,
    requests: list[PreparedRequest],
    concurrency: int,
    phase: Phase,
    run_t0: float,
) -> None:
    timeout_s = phase.settings.timeout_s
    config, level = phase.state.config, phase.state.level

    async def user(u: int) -> None:
        while (i := phase.take()) is not None:
            rec = m.RequestRecord(config, level, u, 0.0, phase.warmup)
            phase.begin(rec)
            await send_with_timeout(session, target, requests[i % len(requests)], rec, run_t0, timeout_s)
            phase.record(rec)

    await asyncio.gather(*(user(u) for u in range(concurrency)))


async def run_open_phase(
    session: aiohttp.ClientSession,
    target: AnyTarget,
    requests: list[PreparedRequest],
    rate_rps: float,
    phase: Phase,
    run_t0: float,
    rng: random.Random,
) -> None:
    timeout_s = phase.settings.timeout_s
    arrivals = Arrivals(rate_rps, phase.settings.burstiness)
    config, level = phase.state.config, phase.state.level
    in_flight: set[asyncio.Task[None]] = set()
    slots = asyncio.Semaphore(phase.settings.max_in_flight)

    async def one(i: int) -> None:
        try:
            rec = m.RequestRecord(config, level, i, 0.0, phase.warmup)
            phase.begin(rec)
            await send_with_timeout(session, target, requests[i % len(requests)], rec, run_t0, timeout_s)
            phase.record(rec)
        finally:
            slots.release()

    next_t = time.perf_counter()
    try:
        while True:
            delay = next_t - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            i = phase.take()
            if i is None:
                break
            await slots.acquire()
            task = asyncio.create_task(one(i))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            next_t += arrivals.gap_s(rng)
        if in_flight:
            await asyncio.gather(*in_flight)
    finally:
        for task in list(in_flight):
            task.cancel()


@dataclass
class LevelOutcome:
    wall_s: float
    stopped: str | None
    stop_detail: str | None = None


async def run_level(
    target: AnyTarget,
    requests: list[PreparedRequest],
    settings: LoadSettings,
    state: LevelState,
    sink: Sink,
    run_t0: float,
    *,
    concurrency: int | None = None,
    rate_rps: float | None = None,
    before_measured: Callable[[], Awaitable[None]] | None = None,
) -> LevelOutcome:
    """Run one level: warm-up requests first (excluded), then the measured phase.
    ``before_measured`` is awaited between the two (a scrape of the server's counters)."""
    if not requests:
        raise ValueError("no requests to send")
    if (concurrency is None) == (rate_rps is None):
        raise ValueError("a level is either a concurrency (closed loop) or a rate (open loop)")
    rng = random.Random(settings.seed)

    async def run_phase(session: aiohttp.ClientSession, phase: Phase) -> None:
        if concurrency is not None:
            await run_closed_phase(session, target, requests, concurrency, phase, run_t0)
        else:
            assert rate_rps is not None
            await run_open_phase(session, target, requests, rate_rps, phase, run_t0, rng)

    async with new_session(concurrency or settings.max_in_flight) as session:
        if settings.warmup > 0:
            state.warmup = True
            await run_phase(session, Phase(state, settings, sink, True, settings.warmup, None))
            state.warmup = False
        if before_measured is not None:
            await before_measured()
        state.started_at = time.perf_counter()
        phase = Phase(state, settings, sink, False, settings.requests, settings.duration_s, settings.warmup)
        watchdog = asyncio.create_task(_watch_waiting(phase)) if phase.watch is not None else None
        try:
            await run_phase(session, phase)
        finally:
            if watchdog is not None:
                watchdog.cancel()
        return LevelOutcome(time.perf_counter() - state.started_at, state.stopped, state.stop_detail)


async def _watch_waiting(phase: Phase, every_s: float = 0.1) -> None:
    while not phase.state.stop:
        await asyncio.sleep(every_s)
        phase.check_waiting()
