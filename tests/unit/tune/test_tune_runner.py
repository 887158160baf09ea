"""The tuner's loop with the sweep replaced by a fake: baseline first, corners, outputs after every
candidate, and what is kept on a budget timeout or a cancellation (Ctrl-C). No servers, no timing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from llmhost.bench.figures.metrics import RequestRecord, summarize_level
from llmhost.bench.figures.slo import GoodputSLO
from llmhost.bench.results import BenchResults, ConfigResult
from llmhost.tune import SearchSpace, Tuner, TuneSettings, TuneSLO
from llmhost.tune.state import CandidateRecord, CandidateState

SLO = TuneSLO(ttft_ms=500, itl_ms=50)


def _level(tpot: float) -> Any:
    recs = []
    for i in range(4):
        r = RequestRecord("c", "c=1", i, 0.0, False, prompt_tokens=8)
        r.finish_ok([0.1 + tpot * k for k in range(5)], 0.1 + tpot * 4, 5)
        recs.append(r)
    return summarize_level(
        recs,
        config="c",
        level="c=1",
        mode="closed",
        concurrency=1,
        rate_rps=None,
        wall_s=2.0,
        price_per_hour=1.0,
        slo=GoodputSLO.from_mapping(SLO.goodput()),
    )


class FakeSweep:
    """Stands in for arun_sweep: one level per candidate; ``hang`` candidates never finish."""

    def __init__(self, hang: set[str] | None = None, cancel: set[str] | None = None) -> None:
        self.started: list[str] = []
        self.hang, self.cancel = hang or set(), cancel or set()

    async def __call__(self, spec: Any, out: Path, progress: Any, results: BenchResults) -> BenchResults:
        serve = spec.configurations[0].serve
        name = f"t{serve.threads}-mc{serve.max_concurrent}"
        self.started.append(name)
        cr = ConfigResult(name, "http://127.0.0.1:1", "openai")
        results.configs.append(cr)
        cr.levels.append(_level(0.03 if serve.max_concurrent != 1 else 0.08))
        try:
            if name in self.cancel:
                raise asyncio.CancelledError
            if name in self.hang:
                await asyncio.sleep(3600)
        except asyncio.CancelledError:
            results.interrupted = True  # as arun_sweep: the server is stopped, the levels kept
            raise
        return results


def tuner(tmp_path: Path, fake: FakeSweep, monkeypatch: pytest.MonkeyPatch, minutes: float = 5.0) -> Any:
    monkeypatch.setattr("llmhost.tune.runner.arun_sweep", fake)
    space = SearchSpace(host_cpus=2, threads=(1, 2), max_concurrent=(1, 4))
    s = TuneSettings(
        models={None: "default"},
        space=space,
        slo=SLO,
        price_per_hour=1.0,
        out_dir=tmp_path,
        max_minutes=minutes,
    )
    saves: list[list[str]] = []

    def save(records: list[CandidateRecord]) -> None:
        saves.append([r.state.value for r in records])

    return Tuner(s, save, None), saves


def test_baseline_first_then_corners_and_saved_after_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSweep()
    t, saves = tuner(tmp_path, fake, monkeypatch)
    records = asyncio.run(t.run())
    assert fake.started[0] == "tNone-mcNone"  # the baseline: `llmhost serve` defaults
    # then the corners, the most CPUs and sequences first
    assert fake.started[1:] == ["t2-mc4", "t2-mc1", "t1-mc4", "t1-mc1"]
    assert [r.phase for r in records] == ["baseline", "corner", "corner", "corner", "corner"]
    assert all(r.state is CandidateState.MEASURED for r in records)
    assert len(saves) == 6  # after each of the 5 candidates, and on the way out
    by_name = {r.candidate.name: r for r in records}
    assert "met the SLO" in by_name["x1-t1-mc4-b512"].reason
    assert "missed the SLO" in by_name["x1-t1-mc1-b512"].reason


def test_the_baseline_settings_are_measured_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MAX_CONCURRENT_REQUESTS", "MAX_BATCH_TOTAL_TOKENS", "LLMHOST_THREADS"):
        monkeypatch.delenv(var, raising=False)
    fake = FakeSweep()
    monkeypatch.setattr("llmhost.tune.runner.arun_sweep", fake)
    # on 2 CPUs, x1-t2-mc8-b512 is what `llmhost serve` runs with no flags
    space = SearchSpace(host_cpus=2, threads=(2,), max_concurrent=(4, 8))
    s = TuneSettings(models={None: "default"}, space=space, slo=SLO, price_per_hour=1.0, out_dir=tmp_path)
    records = asyncio.run(Tuner(s, lambda _: None, None).run())
    assert fake.started == ["tNone-mcNone", "t2-mc4"]
    twin = next(r for r in records if r.candidate.name == "x1-t2-mc8-b512")
    assert twin.state is CandidateState.MEASURED and twin.levels == records[0].levels
    assert twin.phase == "baseline" and "measured once as the baseline" in twin.reason
    monkeypatch.setenv("MAX_CONCURRENT_REQUESTS", "4")  # the baseline is no longer that candidate
    fake.started.clear()
    asyncio.run(Tuner(s, lambda _: None, None).run())
    assert fake.started == ["tNone-mcNone", "t2-mc8", "t2-mc4"]


def test_budget_timeout_keeps_what_was_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSweep(hang={"t2-mc4"})  # the first corner measured
    t, saves = tuner(tmp_path, fake, monkeypatch, minutes=0.01)
    records = asyncio.run(t.run())
    states = [r.state for r in records]
    assert states[0] is CandidateState.MEASURED and states[4] is CandidateState.INTERRUPTED
    assert records[4].levels  # its level measured before the budget ran out is kept
    assert set(states[1:4]) == {CandidateState.OUT_OF_TIME}
    assert "time budget" in records[1].reason and saves[-1][1] == "out_of_time"


def test_cancellation_keeps_what_was_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSweep(cancel={"t2-mc4"})  # the first corner measured
    t, saves = tuner(tmp_path, fake, monkeypatch)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(t.run())
    assert t.records[4].state is CandidateState.INTERRUPTED and t.records[4].levels
    assert {r.state for r in t.records[1:4]} == {CandidateState.OUT_OF_TIME}
    assert "interrupted" in t.records[1].reason and saves[-1][4] == "interrupted"


def test_a_conversations_workload_reaches_every_candidates_bench(tmp_path: Path) -> None:
    from llmhost.bench.load.conversations import ConversationSettings
    from llmhost.bench.sweep import bench_config_for, expand
    from llmhost.tune.runner import Workload, sweep_spec
    from llmhost.tune.space import Candidate

    talk = ConversationSettings(turns=3, system_prompts=2, system_prompt_tokens=100, think_time_s=(0.5, 1.0))
    with pytest.raises(ValueError, match="conversation workload"):
        Workload(prompt_tokens=64, conversations=talk)
    space = SearchSpace(host_cpus=2, threads=(1,), max_concurrent=(4,))
    s = TuneSettings(
        models={None: "default"},
        space=space,
        slo=SLO,
        price_per_hour=1.0,
        out_dir=tmp_path,
        workload=Workload(concurrency=(2, 4), conversations=talk),
    )
    spec = sweep_spec(s, Candidate(1, 1, 4, 512))
    assert spec.workload == "conversations" and spec.requests is None and spec.warmup == 0
    [launch] = expand(spec)
    cfg = bench_config_for(spec, launch, "http://127.0.0.1:1")
    cfg.validate()
    assert cfg.conversation_settings() == talk
    assert [label for label, _, _ in cfg.levels()] == ["users=2", "users=4"]
