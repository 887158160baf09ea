"""A fault stays with the request that caused it: the engine and its async bridge on a fake model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llmhost.engine import (
    AsyncEngine,
    Engine,
    EngineState,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
)
from llmhost.engine.drafter import Drafter
from llmhost.engine.kv.prefix_cache import KvTrim
from llmhost.engine.kv_runner import KvOpError
from tests.unit.engine_fakes import BOMB, N_VOCAB, POISON, FakeModel, config, engine_factory, expected

GOOD = {"a": [1, 2, 3], "b": [10, 11], "c": [20, 21, 22, 23]}


class Recorder:
    def __init__(self) -> None:
        self.events: dict[str, list[GenerationEvent]] = {}

    def step(self, engine: Engine) -> None:
        for event in engine.step():
            self.events.setdefault(event.request_id, []).append(event)

    def tokens(self, rid: str) -> list[int]:
        return [t for e in self.events[rid] for t in e.token_ids]

    def last(self, rid: str) -> GenerationEvent:
        return self.events[rid][-1]


def request(rid: str, prompt: list[int], n: int = 6, **kw: Any) -> GenerationRequest:
    return GenerationRequest(rid, prompt, SamplingParams(max_tokens=n, temperature=0.0, **kw))


def run(engine: Engine, prompts: dict[str, list[int]], n: int = 6, max_steps: int = 100) -> Recorder:
    rec = Recorder()
    for rid, prompt in prompts.items():
        engine.add(request(rid, prompt, n))
    for _ in range(max_steps):
        if not engine.has_work:
            break
        rec.step(engine)
    assert not engine.has_work, "the engine never finished"
    return rec


def assert_good(rec: Recorder, n: int = 6) -> None:
    for rid, prompt in GOOD.items():
        assert rec.tokens(rid) == expected(prompt, n), rid
        assert rec.last(rid).finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize(("bad_prompt", "what"), [([5, POISON, 6], "decode failed"), ([7, BOMB], "sampling")])
def test_one_bad_sequence_fails_alone(bad_prompt: list[int], what: str) -> None:
    alone = run(engine_factory(FakeModel(), config()), GOOD)
    model = FakeModel()
    rec = run(engine_factory(model, config()), {**GOOD, "bad": bad_prompt})
    assert_good(rec)
    for rid in GOOD:
        assert rec.tokens(rid) == alone.tokens(rid)
    bad = rec.last("bad")
    assert bad.finish_reason is FinishReason.ERROR and what in (bad.error or "")
    assert any(len(items) > 1 for items in model.decodes), "the good requests never shared a decode"


def test_token_ids_outside_the_vocabulary_are_refused_naming_the_field() -> None:
    engine = engine_factory(FakeModel(), config())
    with pytest.raises(InvalidRequestError) as prompt_err:
        engine.add(request("x", [1, N_VOCAB + 5]))
    assert prompt_err.value.field_name == "prompt" and prompt_err.value.limit == N_VOCAB - 1
    with pytest.raises(InvalidRequestError) as bias_err:
        engine.add(request("y", [1], logit_bias={-3: 1.0}))
    assert bias_err.value.field_name == "logit_bias"
    assert not engine.has_work


def test_a_failed_kv_operation_is_kept_and_fails_no_request() -> None:
    model = FakeModel()
    engine = engine_factory(model, config(prefix_caching=False))  # a finished slot is emptied
    rec = Recorder()
    # "long" has the shorter prompt, so it is admitted first, to the lower id: none moves down into
    # the id "short" leaves
    engine.add(request("short", [1, 2, 3], n=1))
    engine.add(request("long", [30, 31], n=8))
    rec.step(engine)  # both prefill; "short" ends, its KV to be freed at the next step
    assert rec.last("short").finish_reason is FinishReason.LENGTH
    free = KvTrim(rec_seq_kv(engine, model), 0)
    model.fail_op = free
    with pytest.raises(KvOpError):
        engine.step()
    assert engine.recover() == 0
    while engine.has_work:
        rec.step(engine)
    assert model.applied.count(free) == 1
    assert rec.tokens("long") == expected([30, 31], 8)


def rec_seq_kv(engine: Engine, model: FakeModel) -> int:
    """The KV sequence id of the one request that has finished (the other still runs)."""
    running = {s.kv_seq for s in engine.scheduler.running}
    used = {seq for items in model.decodes for _, _, seq, _ in items}
    (kv,) = used - running
    return kv


def test_deadlines_free_the_sequence_with_a_timeout() -> None:
    now = [0.0]
    model = FakeModel()
    engine = engine_factory(
        model, config(max_concurrent=1, queue_timeout_s=5, request_timeout_s=10), clock=lambda: now[0]
    )
    rec = Recorder()
    engine.add(request("running", [1], n=100))
    engine.add(request("queued", [2], n=4))
    for t in (1.0, 2.0, 6.0):
        now[0] = t
        rec.step(engine)
    assert rec.last("queued").finish_reason is FinishReason.TIMEOUT
    assert rec.last("queued").reason == "queue" and "5 s" in (rec.last("queued").error or "")
    now[0] = 11.0
    rec.step(engine)
    last = rec.last("running")
    assert last.finish_reason is FinishReason.TIMEOUT and last.reason == "request"
    rec.step(engine)
    cache = engine.scheduler.cache
    assert cache.can_acquire() and cache.held_seqs == 1, "its slot is free, holding its KV for reuse"
    assert engine.snapshot.running == 0 and engine.snapshot.waiting == 0


def test_abort_before_admission_decodes_nothing() -> None:
    model = FakeModel()
    engine = engine_factory(model, config(max_concurrent=1))
    rec = Recorder()
    engine.add(request("first", [1], n=3))
    engine.add(request("second", [40, 41, 42], n=3))
    engine.abort("second", "client")
    while engine.has_work:
        rec.step(engine)
    assert rec.last("second").finish_reason is FinishReason.ABORT
    assert all(40 not in tokens for items in model.decodes for tokens, _, _, _ in items)
    assert rec.tokens("first") == expected([1], 3)


def test_draft_model_kv_is_freed_when_a_sequence_ends() -> None:
    target, draft = FakeModel(), FakeModel()
    engine = Engine(
        target,  # type: ignore[arg-type]
        config(speculative="draft", draft_model="fake.gguf", draft_tokens=3),
        drafter=Drafter(draft, N_VOCAB),  # type: ignore[arg-type]
    )
    rec = run(engine, {"a": [1, 2]}, n=7)
    assert rec.tokens("a") == expected([1, 2], 7)
    kv = target.decodes[0][0][2]
    assert draft.applied[-1] == KvTrim(kv, 0), "the draft model still holds the sequence's KV"


# -- the async bridge ---------------------------------------------------------------------------------
def bridge(model: FakeModel, **kw: Any) -> AsyncEngine:
    cfg = config(**kw)
    engine = AsyncEngine("fake.gguf", cfg, load=lambda: engine_factory(model, cfg))
    engine.start()
    assert engine.wait_ready(10)
    return engine


async def test_bridge_refuses_bad_requests_before_queueing_and_serves_the_rest() -> None:
    engine = bridge(FakeModel())
    try:
        with pytest.raises(InvalidRequestError):
            engine.submit(request("bad", [1, 999]))
        streams = [engine.submit(request(rid, prompt)) for rid, prompt in GOOD.items()]
        results = await asyncio.wait_for(asyncio.gather(*(s.collect() for s in streams)), 10)
        for (rid, prompt), events in zip(GOOD.items(), results, strict=True):
            assert [t for e in events for t in e.token_ids] == expected(prompt, 6), rid
        assert engine.in_flight == 0
    finally:
        engine.shutdown()


async def test_engine_whose_steps_keep_failing_dies_and_fails_everything_fast(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = FakeModel()
    engine = bridge(model, max_step_failures=3, prefix_caching=False)  # a finished slot is trimmed
    try:

        def always_fail(op: Any) -> None:
            raise RuntimeError("KV store broken")

        model.apply = always_fail  # type: ignore[method-assign]
        # "short" ends at the first step and leaves a KV trim behind: every later step fails on it
        short = engine.submit(request("short", [1], n=1))
        streams = [engine.submit(request(rid, prompt, n=100)) for rid, prompt in GOOD.items()]
        assert (await asyncio.wait_for(short.collect(), 10))[-1].finish_reason is FinishReason.LENGTH
        results = await asyncio.wait_for(asyncio.gather(*(s.collect() for s in streams)), 10)
        for events in results:
            assert events[-1].finish_reason is FinishReason.ERROR
            assert events[-1].reason == "engine_dead" and "3 engine steps" in (events[-1].error or "")
        assert engine.state is EngineState.DEAD and engine.dead
        assert engine.in_flight == 0
        # the log line that fails them names each request
        [dead] = [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL"]
        assert all(rid in dead for rid in GOOD), dead
        with pytest.raises(Exception, match="dead"):
            engine.submit(request("late", [1]))
    finally:
        engine.shutdown()
