"""Measure candidates one after another with `llmhost bench sweep`'s machinery, within a budget.

Every candidate is a one-configuration sweep: `llmhost serve` for one copy, `llmhost endpoint up`
on a generated endpoint file for several (sweep.py starts, waits for and stops them), the same
workload at the same rising concurrency levels, up to saturation. Each candidate's bench results
directory is kept under ``OUT/candidates/NAME``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmhost.bench.load.conversations import ConversationSettings
from llmhost.bench.results import BenchResults
from llmhost.bench.runner import NullProgress, Progress
from llmhost.bench.serve_config import ServeSpec
from llmhost.bench.sweep import ConfigSpec, SweepSpec, arun_sweep
from llmhost.settings.serve import SERVE_SPEC, default_value
from llmhost.tune.adapters import SERVED_NAME, Adapters
from llmhost.tune.search import Search
from llmhost.tune.slo import TuneSLO, judge
from llmhost.tune.space import Candidate, SearchSpace
from llmhost.tune.state import CandidateRecord, CandidateState

# `llmhost serve` reads these when its flags are not given: set, they change what the baseline runs
SERVE_ENV = tuple(SERVE_SPEC[n].env for n in ("max_concurrent", "max_batch_tokens", "threads"))
# CPUs that processes other than the candidate's and the load generator used on average while it was
# measured (bench.figures.procstats), at or above which its figures are said to be suspect
BUSY_OTHER_CPUS = 0.25


@dataclass(frozen=True)
class Workload:
    """What every candidate is sent: the built-in prompts, a prompts file, synthetic prompts, or
    conversations (each concurrency level then counts users, each holding its conversation's turns)."""

    prompts_file: str | None = None
    prompt_tokens: int | None = None  # synthetic prompts of this length; None: built-in prompts
    max_new_tokens: int = 64
    num_prompts: int = 32
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    requests: int = 16  # measured requests per level
    warmup: int = 1
    conversations: ConversationSettings | None = None
    model_mix: tuple[str, ...] = ()  # the models requests name in turn (bench's `--model a,b`)

    def __post_init__(self) -> None:
        if self.model_mix and self.conversations is not None:
            raise ValueError("--model-mix applies to the prompts workload")
        if self.prompts_file and self.prompt_tokens is not None:
            raise ValueError("give a prompts file or synthetic prompt tokens, not both")
        if self.conversations is not None and (self.prompts_file or self.prompt_tokens is not None):
            raise ValueError("the conversation workload has no prompts file or synthetic prompt tokens")
        if self.max_new_tokens < 1 or self.requests < 1 or self.warmup < 0 or self.num_prompts < 1:
            raise ValueError("max_new_tokens, requests and num_prompts must be >= 1, warmup >= 0")
        if not self.concurrency or min(self.concurrency) < 1:
            raise ValueError("concurrency levels must be at least 1")


@dataclass(frozen=True)
class TuneSettings:
    models: dict[str | None, str]  # quantization type (None: as given) → GGUF path
    space: SearchSpace
    slo: TuneSLO
    price_per_hour: float
    out_dir: Path
    workload: Workload = field(default_factory=Workload)
    max_minutes: float = 30.0
    saturation_gain: float = 0.05
    startup_timeout_s: float = 600.0
    prune_ratio: float = 0.8
    # when the budget started (time.monotonic()): quantizing candidates before the search counts too
    started_at: float = field(default_factory=time.monotonic)
    adapters: Adapters = field(default_factory=Adapters)  # loaded by every candidate's server

    def __post_init__(self) -> None:
        if self.max_minutes <= 0:
            raise ValueError("--max-minutes must be positive")
        if self.price_per_hour < 0:
            raise ValueError("the price per hour must be >= 0")
        missing = [q for q in self.space.quants if q not in self.models]
        if missing or None not in self.models:
            raise ValueError(f"no model file for quantization {missing or [None]}")
        self.adapters.check_mix(self.workload.model_mix)

    @property
    def named(self) -> bool:
        """Whether requests name their model: where adapters are served, or a mix is given."""
        return bool(self.adapters.entries or self.workload.model_mix)

    @property
    def model_names(self) -> str | None:
        """What bench sends as `model`: the mix (comma-separated), else the base model's name."""
        return ",".join(self.workload.model_mix or (SERVED_NAME,)) if self.named else None


def sweep_spec(s: TuneSettings, cand: Candidate) -> SweepSpec:
    """The one-configuration sweep measuring ``cand``."""
    w = s.workload
    serve = ServeSpec(
        model=s.models[cand.quant],
        threads=cand.threads,
        max_concurrent=cand.max_concurrent,
        max_batch_tokens=cand.max_batch_tokens,
        copies=cand.copies,
        router_cpus=s.space.router_cpus if cand.copies > 1 else 0,
        speculative="ngram" if cand.speculative else None,
        lora=s.adapters.lora_options() or None,
        # several copies: an endpoint, whose component (bench's endpoint file) is named SERVED_NAME
        served_model_name=SERVED_NAME if s.named and cand.copies == 1 else None,
    )
    conv = w.conversations
    talk = (
        {}
        if conv is None
        else {
            "workload": "conversations",
            "conversations_file": conv.file,
            "turns": conv.turns,
            "system_prompts": conv.system_prompts,
            "system_prompt_tokens": conv.system_prompt_tokens,
            "user_tokens": conv.user_tokens,
            "think_time_s": conv.think_time_s,
            "seed": conv.seed,
            # a level is its users' turns: no request count, no warm-up, no early SLO stop over a count
            "requests": None,
            "warmup": 0,
            "slo_stop": None,
            "builtin_prompts": False,
        }
    )
    spec = SweepSpec(
        name=cand.name,
        api="openai",
        concurrency=list(w.concurrency),
        requests=w.requests,
        warmup=w.warmup,
        prompt_tokens=w.prompt_tokens or 128,
        max_new_tokens=w.max_new_tokens,
        temperature=0.0,  # greedy for every candidate: speculation drafts greedy requests only
        prompts_file=w.prompts_file,
        builtin_prompts=not w.prompts_file and w.prompt_tokens is None,
        num_prompts=w.num_prompts,
        price_per_hour=s.price_per_hour,
        goodput=s.slo.goodput(),
        # a level that can no longer meet the SLO stops, and so does the candidate's rising load
        slo_stop=float(s.slo.percentile),
        saturation_gain=s.saturation_gain,
        startup_timeout_s=s.startup_timeout_s,
        configurations=[ConfigSpec(serve=serve, model_name=s.model_names)],
    )
    return spec.model_copy(update=talk)


def initial_records(space: SearchSpace) -> list[CandidateRecord]:
    """The baseline first, then the grid, with what does not fit the host marked so."""
    out = [CandidateRecord(Candidate(baseline=True), phase="baseline")]
    for cand in space.grid():
        why = space.unfit_reason(cand)
        state = CandidateState.UNFIT if why else CandidateState.PENDING
        out.append(CandidateRecord(cand, state, why or ""))
    return out


class Tuner:
    """Runs the search; ``on_update`` is called with the records after every change worth saving."""

    def __init__(
        self,
        settings: TuneSettings,
        on_update: Callable[[list[CandidateRecord]], None],
        progress: Progress | None = None,
    ) -> None:
        self.settings = settings
        self.records = initial_records(settings.space)
        self.search = Search(
            settings.space.axes(),
            settings.slo,
            settings.prune_ratio,
            settings.space.host_cpus,
            max(settings.workload.concurrency),
        )
        self.on_update = on_update
        self.progress = progress or NullProgress()
        self.deadline = settings.started_at + settings.max_minutes * 60.0
        self.stopped_by = "the time budget ran out"  # what a candidate left unmeasured is told
        self.interrupted = False  # set by `interrupt`: no further candidate is measured

    def interrupt(self) -> None:
        """Ctrl-C: stop at the latest before the next candidate. The caller also cancels the run; this
        holds even where a library swallowed that cancellation (Python 3.11's wait_for can)."""
        self.interrupted = True
        self.stopped_by = "the tuner was interrupted"

    async def run(self) -> list[CandidateRecord]:
        """Baseline, then the search, until it is done or the budget is spent; cancellation (Ctrl-C)
        keeps what was measured."""
        try:
            async with asyncio.timeout_at(asyncio.get_running_loop().time() + self.remaining()):
                await self.measure(self.records[0])
                self.share_baseline()
                while (step := self.search.next(self.records)) is not None:
                    record, phase = step
                    if self.interrupted or not self.affordable():
                        break
                    record.phase = phase
                    await self.measure(record)
        except TimeoutError:
            self.progress.message("time budget spent; writing what was measured")
        except asyncio.CancelledError:
            self.stopped_by = "the tuner was interrupted"
            raise
        finally:
            self.close_out()
        return self.records

    def share_baseline(self) -> None:
        """The grid candidate with the baseline's own settings is not measured twice."""
        if any(os.environ.get(v) for v in SERVE_ENV):
            return  # the baseline's defaults were changed by the environment: not that candidate
        defaults = Candidate(
            max_concurrent=default_value("max_concurrent", {}),
            max_batch_tokens=default_value("max_batch_tokens", {}),
        )
        twin = self.settings.space.baseline_twin(defaults)
        base = self.records[0]
        for r in self.records[1:]:
            if r.candidate == twin and r.state is CandidateState.PENDING:
                r.state, r.phase, r.levels = base.state, "baseline", list(base.levels)
                r.results_dir, r.processes = base.results_dir, base.processes
                r.reason = f"the baseline's settings, measured once as the baseline: {base.reason}"
                self.on_update(self.records)

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def affordable(self) -> bool:
        """Whether a typical measurement so far still fits the time left."""
        spent = [r.seconds for r in self.records if r.measured]
        return not spent or self.remaining() >= sum(spent) / len(spent)

    async def measure(self, record: CandidateRecord) -> None:
        cand = record.candidate
        out = self.settings.out_dir / "candidates" / cand.name
        record.state, record.results_dir = CandidateState.MEASURING, str(out)
        self.progress.message(f"{cand.name}: measuring ({record.phase})")
        results, t0 = BenchResults(), time.monotonic()
        try:
            await arun_sweep(sweep_spec(self.settings, cand), out, self.progress, results)
        finally:
            record.seconds = time.monotonic() - t0
            self.collect(record, results)
            self.on_update(self.records)

    def collect(self, record: CandidateRecord, results: BenchResults) -> None:
        cr = results.configs[0] if results.configs else None
        levels = cr.levels if cr is not None else []
        record.levels = [judge(lv, self.settings.slo) for lv in levels]
        record.processes = cr.processes if cr is not None else None
        others = record.processes["other_cpus"] if record.processes is not None else 0.0
        if others >= BUSY_OTHER_CPUS:
            name = record.candidate.name
            self.progress.message(
                f"{name}: other processes used {others:.2f} CPUs meanwhile; its figures may suffer"
            )
        if cr is not None and cr.error:
            record.state, record.reason = CandidateState.FAILED, cr.error.splitlines()[0]
        elif results.interrupted or (cr is not None and cr.stopped == "interrupted"):
            record.state, record.reason = CandidateState.INTERRUPTED, "stopped mid-measurement"
        else:
            record.state = CandidateState.MEASURED
            met = record.meeting()
            record.reason = (
                f"met the SLO at {', '.join(lv.level for lv in met)}"
                if met
                else "missed the SLO at every level: "
                + "; ".join(f"{lv.level}: {lv.why}" for lv in record.levels)
            )

    def close_out(self) -> None:
        for r in self.records:
            if r.state is CandidateState.PENDING:
                r.state, r.reason = CandidateState.OUT_OF_TIME, f"not measured: {self.stopped_by}"
            elif r.state is CandidateState.MEASURING:
                r.state, r.reason = CandidateState.INTERRUPTED, "stopped mid-measurement"
        self.on_update(self.records)
