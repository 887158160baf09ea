"""The load generator: closed loop (N users, each sending its next request when the last one ended)
and open loop (arrivals at a rate: Poisson, or gamma-distributed gaps with a burstiness factor, see
:mod:`llmhost.bench.arrivals`), over keep-alive connections of :mod:`llmhost.bench.http`.

A request never raises: every failure becomes a :class:`RequestRecord` with an error kind. A level
ends when its duration or request count is reached (requests in flight are completed, bounded by the
per-request timeout), or early when the error rate passes its bound.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from llmhost.bench import metrics as m
from llmhost.bench.arrivals import Arrivals
from llmhost.bench.http import Connection, Endpoint, HttpClientError
from llmhost.bench.sse import SSEDecoder
from llmhost.bench.targets import StreamError, Target


@dataclass(frozen=True)
class PreparedRequest:
    """A request encoded once, sent many times."""

    data: bytes
    prompt_tokens: int


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
        self.target_requests = settings.requests
        self.duration_s = settings.duration_s
        self.warmup = False


Sink = Callable[[m.RequestRecord], None]


async def send_one(
    conn: Connection,
    target: Target,
    prep: PreparedRequest,
    rec: m.RequestRecord,
    run_t0: float,
) -> None:
    """Send one request on ``conn`` and fill ``rec``; never raises (except on cancellation)."""
    t0 = time.perf_counter()
    rec.start_s = t0 - run_t0
    rec.prompt_tokens = prep.prompt_tokens
    stream = target.new_stream()
    try:
        resp = await conn.request(prep.data)
        rec.status = resp.status
        if resp.status != 200:
            body = await resp.read_all(2048)
            conn.release(resp)
            rec.e2e_s = time.perf_counter() - t0
            rec.error = m.error_kind_for_status(resp.status)
            rec.error_detail = body[:300].decode("utf-8", "replace")
            return
        decoder = SSEDecoder()
        # arrival of each event carrying generated text, however many tokens it holds (one ITL gap
        # per event, as vLLM); events of one network read share the time that read returned
        token_times: list[float] = []
        feed = stream.feed
        while (chunk := await resp.read_chunk()) is not None:
            now = time.perf_counter()
            for payload in decoder.feed(chunk):
                if feed(payload):
                    token_times.append(now - t0)
        end = time.perf_counter()
        for payload in decoder.finish():
            if feed(payload):
                token_times.append(end - t0)
        conn.release(resp)
        stream.check_complete()
        if not token_times:
            raise StreamError(m.MALFORMED_STREAM, "stream carried no generated token")
        rec.finish_ok(token_times, end - t0, stream.output_tokens)
        rec.tokens_counted_by = stream.counted_by
        if stream.reported_prompt_tokens is not None:
            rec.prompt_tokens = stream.reported_prompt_tokens
    except HttpClientError as exc:
        conn.close()
        rec.error = m.MALFORMED_STREAM if exc.kind == "malformed_response" else exc.kind
        rec.error_detail = exc.detail
        rec.e2e_s = time.perf_counter() - t0
    except StreamError as exc:
        conn.close()
        rec.error = exc.kind
        rec.error_detail = exc.detail
        rec.e2e_s = time.perf_counter() - t0
    except asyncio.CancelledError:
        conn.close()
        raise
    except Exception as exc:  # a benchmark never crashes on one bad answer
        conn.close()
        rec.error = m.OTHER
        rec.error_detail = f"{type(exc).__name__}: {exc}"
        rec.e2e_s = time.perf_counter() - t0


async def send_with_timeout(
    conn: Connection,
    target: Target,
    prep: PreparedRequest,
    rec: m.RequestRecord,
    run_t0: float,
    timeout_s: float,
) -> None:
    try:
        await asyncio.wait_for(send_one(conn, target, prep, rec, run_t0), timeout_s)
    except TimeoutError:
        conn.close()
        rec.ok = False
        rec.error = m.TIMEOUT
        rec.error_detail = f"no complete answer within {timeout_s:g} s"
        rec.e2e_s = timeout_s


class _Phase:
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

    def record(self, rec: m.RequestRecord) -> None:
        self.sink(rec)
        if self.warmup:
            return
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
    endpoint: Endpoint,
    target: Target,
    requests: list[PreparedRequest],
    concurrency: int,
    phase: _Phase,
    run_t0: float,
    conns: list[Connection],
) -> None:
    timeout_s = phase.settings.timeout_s
    config, level = phase.state.config, phase.state.level

    async def user(u: int) -> None:
        conn = conns[u]
        while (i := phase.take()) is not None:
            rec = m.RequestRecord(config, level, u, 0.0, phase.warmup)
            await send_with_timeout(conn, target, requests[i % len(requests)], rec, run_t0, timeout_s)
            phase.record(rec)

    await asyncio.gather(*(user(u) for u in range(concurrency)))


async def run_open_phase(
    endpoint: Endpoint,
    target: Target,
    requests: list[PreparedRequest],
    rate_rps: float,
    phase: _Phase,
    run_t0: float,
    rng: random.Random,
) -> None:
    timeout_s = phase.settings.timeout_s
    arrivals = Arrivals(rate_rps, phase.settings.burstiness)
    config, level = phase.state.config, phase.state.level
    idle: list[Connection] = []
    in_flight: set[asyncio.Task[None]] = set()
    slots = asyncio.Semaphore(phase.settings.max_in_flight)

    async def one(i: int, conn: Connection) -> None:
        try:
            rec = m.RequestRecord(config, level, i, 0.0, phase.warmup)
            await send_with_timeout(conn, target, requests[i % len(requests)], rec, run_t0, timeout_s)
            phase.record(rec)
            if conn.is_open:
                idle.append(conn)
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
            conn = idle.pop() if idle else Connection(endpoint)
            task = asyncio.create_task(one(i, conn))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            next_t += arrivals.gap_s(rng)
        if in_flight:
            await asyncio.gather(*in_flight)
    finally:
        for task in list(in_flight):
            task.cancel()
        for conn in idle:
            conn.close()


@dataclass
class LevelOutcome:
    wall_s: float
    stopped: str | None


async def run_level(
    endpoint: Endpoint,
    target: Target,
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
    conns: list[Connection] = [Connection(endpoint) for _ in range(concurrency or 0)]
    try:
        if settings.warmup > 0:
            state.warmup = True
            warm = _Phase(state, settings, sink, True, settings.warmup, None)
            if concurrency is not None:
                await run_closed_phase(endpoint, target, requests, concurrency, warm, run_t0, conns)
            else:
                assert rate_rps is not None
                await run_open_phase(endpoint, target, requests, rate_rps, warm, run_t0, rng)
            state.warmup = False
        if before_measured is not None:
            await before_measured()
        state.started_at = time.perf_counter()
        phase = _Phase(state, settings, sink, False, settings.requests, settings.duration_s, settings.warmup)
        if concurrency is not None:
            await run_closed_phase(endpoint, target, requests, concurrency, phase, run_t0, conns)
        else:
            assert rate_rps is not None
            await run_open_phase(endpoint, target, requests, rate_rps, phase, run_t0, rng)
        return LevelOutcome(time.perf_counter() - state.started_at, state.stopped)
    finally:
        for conn in conns:
            conn.close()
