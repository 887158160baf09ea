"""How many llama.cpp micro-batches the engine's schedule costs on `serve_compare.py`'s concurrency-8
work, against the cheapest schedule there is (`throughput_bound.py`'s): a deterministic count, where
whole-server throughput on a shared 2-core host is noise.

With a KV stream per sequence llama.cpp splits a llama_decode into micro-batches with `split_equal`
(sequential): a micro-batch takes a run of consecutive sequence ids and the same number of tokens
from each, as many as the shortest of them has left (and n_ubatch allows). A step whose sequences
carry different numbers of tokens is therefore several micro-batches: decode tokens (one per
sequence) take one, each other length of prompt chunk one more. `split_equal` below does what
llama.cpp does; `--check` compares it with llama.cpp's own account (LLAMA_BATCH_DEBUG) on the
default model.

The engine runs its real scheduler in-process, closed loop (a request sent as one finishes, as
`llmhost.bench` does):
- `--model fake`: the unit tests' stand-in model (no llama.cpp), time from a cost model of llama.cpp
  on the default model (single-thread CPU ms, measured on the 2-core host: a micro-batch 16, a token
  2.7, an output row 7.6; fitted from llama_decode of 1x1, 8x1, 1x64 and 8x64-token batches);
- `--model default`: the default model on 1 thread, time = the process's CPU time (the work, not
  the shared machine's load), tokens from a seeded generator.
TTFT and output tokens/s are in those units: compare runs with each other, not with servers.

    .venv/bin/python benchmarks/micro_batches.py --model fake
    .venv/bin/python benchmarks/micro_batches.py --model default --requests 16 --new 32
    LLAMA_BATCH_DEBUG=1 .venv/bin/python benchmarks/micro_batches.py --check
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmhost.engine import Engine, EngineConfig, GenerationRequest, SamplingParams

RESULTS = Path(__file__).parent / "results" / "micro_batches.json"
# serve_compare.py's workloads: (prefix tokens shared by all, prompt tokens of each, new tokens)
WORKLOADS = {"distinct": (0, 200, 64), "shared_prefix": (1000, 50, 50)}
Item = tuple[int, int, int]  # a decode item: (sequence id, tokens, output rows)
Ubatch = tuple[int, int, int]  # a micro-batch: (sequences, tokens of each, output rows)


def split_equal(items: list[Item], n_ubatch: int = 512) -> list[Ubatch]:
    """The micro-batches llama.cpp's `split_equal(n_ubatch, sequential=true)` makes of one batch."""
    left = {s: n for s, n, _ in items}
    outputs = {s: o for s, _, o in items}
    out = []
    while any(left.values()):
        run: list[int] = []
        for s in sorted(left):
            if left[s] and (not run or s == run[-1] + 1):
                run.append(s)
        k = 0
        while all(left[s] > k for s in run):
            k += 1
            if (k + 1) * len(run) > n_ubatch:
                break
        # output rows sit at the end of each item: those among the k tokens taken now
        rows = sum(max(0, min(left[s], outputs[s]) - (left[s] - k)) for s in run)
        for s in run:
            left[s] -= k
        out.append((len(run), k, rows))
    return out


@dataclass(frozen=True)
class CostModel:
    """Single-thread CPU ms of a llama_decode of the default model (see the module docstring)."""

    ubatch: float = 16.0
    token: float = 2.7
    row: float = 7.6

    def ms(self, ubatches: list[Ubatch]) -> float:
        return sum(self.ubatch + self.token * n * k + self.row * rows for n, k, rows in ubatches)


class Counter:
    """Wraps a model's `decode`: counts its calls and their micro-batches, and advances the fake clock."""

    def __init__(self, model: Any, cost: CostModel | None, n_ubatch: int) -> None:
        self.model, self.cost, self.n_ubatch = model, cost, n_ubatch
        self.calls = self.ubatches = 0
        self.now = 0.0
        self.first_steps: list[list[Ubatch]] = []
        decode = model.decode

        def counted(items: list[tuple[list[int], int, int, int]]) -> list[int]:
            ubatches = split_equal([(s, len(t), o) for t, _, s, o in items], n_ubatch)
            self.calls += 1
            self.ubatches += len(ubatches)
            if len(self.first_steps) < 6:
                self.first_steps.append(ubatches)
            if cost is not None:
                self.now += cost.ms(ubatches) / 1e3
            return decode(items)  # type: ignore[no-any-return]

        model.decode = counted

    def clock(self) -> float:
        return self.now if self.cost is not None else time.process_time()


def closed_loop(
    eng: Engine, counter: Counter, prompts: list[list[int]], new: int, width: int
) -> dict[str, Any]:
    """Run `prompts` `width` at a time, each sent as one finishes; figures from the first request on."""
    arrival: dict[str, float] = {}
    first: dict[str, float] = {}
    pending = list(prompts)
    calls0, ubatches0, t0 = counter.calls, counter.ubatches, counter.clock()
    counter.first_steps.clear()

    def send() -> None:
        rid = f"r{len(arrival)}"
        arrival[rid] = counter.clock()
        params = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
        eng.add(GenerationRequest(rid, pending.pop(0), params), arrival_s=arrival[rid])

    for _ in range(min(width, len(pending))):
        send()
    while eng.has_work:
        for event in eng.step():
            if event.token_ids and event.request_id not in first:
                first[event.request_id] = counter.clock() - arrival[event.request_id]
            if event.finished and pending:
                send()
    seconds = counter.clock() - t0
    ttft = sorted(first.values())
    return {
        "llama_decode_calls": counter.calls - calls0,
        "micro_batches": counter.ubatches - ubatches0,
        "seconds": round(seconds, 3),
        "output_tokens_per_s": round(len(prompts) * new / seconds, 2),
        "ttft_p50_s": round(statistics.median(ttft), 3),
        "ttft_p90_s": round(ttft[int(0.9 * (len(ttft) - 1))], 3),
    }


def make_engine(model_name: str, budget: int, width: int) -> tuple[Engine, Counter, Callable[[int], int]]:
    """The engine on `model_name`, its decode counter, and a token generator in its vocabulary."""
    cfg = EngineConfig(
        max_concurrent=width,
        max_batch_tokens=budget,
        max_input_tokens=2048,
        max_total_tokens=4096,
        max_queue=64,
        n_threads=1,
        prompt_cache_mb=0,
    )
    rng = random.Random(0)
    if model_name == "fake":
        from tests.unit.engine_fakes import FakeModel

        fake = FakeModel()
        counter = Counter(fake, CostModel(), cfg.llama_n_ubatch)
        eng = Engine(fake, cfg, clock=counter.clock)  # type: ignore[arg-type]
        return eng, counter, lambda _: rng.randrange(1, 41)  # below the fake's special tokens
    from llmhost.engine import LlamaModel
    from llmhost.store import resolve_model

    llama = LlamaModel(resolve_model(), cfg)
    counter = Counter(llama, None, cfg.llama_n_ubatch)
    return Engine(llama, cfg, clock=counter.clock), counter, lambda _: rng.randrange(1000, 20000)


def workload(name: str, args: argparse.Namespace) -> dict[str, Any]:
    prefix_n, prompt_n, new = WORKLOADS[name]
    new = args.new or new
    out: dict[str, Any] = {"bound": bound(prefix_n, prompt_n, new, args.requests, args.concurrency)}
    for budget in args.max_batch_tokens:
        eng, counter, token = make_engine(args.model, budget, args.concurrency)
        prefix = [token(0) for _ in range(prefix_n)]
        if prefix:  # the shared prompt computed once before the clock, as a warm server holds it
            closed_loop(eng, counter, [[*prefix, token(0)]], 1, 1)
        prompts = [[*prefix, *(token(0) for _ in range(prompt_n))] for _ in range(args.requests)]
        out[f"max_batch_tokens={budget}"] = closed_loop(eng, counter, prompts, new, args.concurrency)
        out[f"max_batch_tokens={budget}"]["first_steps"] = list(counter.first_steps)
        eng.close()
    return out


def bound(prefix: int, prompt: int, new: int, requests: int, width: int) -> dict[str, Any]:
    """throughput_bound.py's schedule: waves of `width` prompts in one llama_decode, then decode steps."""
    wave = split_equal([(s, prompt, 1) for s in range(width)]) + [(width, 1, width)] * (new - 1)
    waves = requests // width
    seconds = waves * CostModel().ms(wave) / 1e3
    return {"micro_batches": waves * len(wave), "seconds_cost_model": round(seconds, 3)}


def check() -> None:
    """split_equal against llama.cpp's own micro-batches (LLAMA_BATCH_DEBUG=1) on the default model."""
    from llmhost.engine import LlamaModel
    from llmhost.engine.kv.prefix_cache import KvTrim
    from llmhost.engine.llamacpp.backend import add_log_listener
    from llmhost.store import resolve_model

    lines: list[str] = []
    add_log_listener(lines.append)
    cfg = EngineConfig(
        max_concurrent=8, max_total_tokens=512, max_input_tokens=256, n_threads=1, prompt_cache_mb=0
    )
    model = LlamaModel(resolve_model(), cfg)
    rng = random.Random(0)
    cases = [
        [(0, 200, 1), (1, 200, 1), (2, 112, 0)],
        [(0, 1, 1), (1, 1, 1), (2, 88, 1), (3, 200, 0), (5, 22, 0)],
        [(s, 1, 1) for s in range(8) if s != 3] + [(3, 199, 1)],
        [(s, 64, 0) for s in range(8)],
    ]
    for case in cases:
        lines.clear()
        model.decode([([rng.randrange(1000, 20000) for _ in range(n)], 0, s, o) for s, n, o in case])
        found = re.findall(r"n_seq_tokens\s*=\s*(\d+).*?n_seqs\s*=\s*(\d+)", "".join(lines), re.S)[1:]
        theirs = [(int(n), int(k)) for k, n in found]  # the first print is the whole input batch
        ours = [(n, k) for n, k, _ in split_equal(case, cfg.llama_n_ubatch)]
        print(
            f"{case if len(case) < 4 else f'{len(case)} items'}: llama.cpp {theirs}, split_equal {ours}",
            "same" if theirs == ours else "DIFFERENT",
        )
        for s, _, _ in case:
            model.apply(KvTrim(s, 0))
    model.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["fake", "default"], default="fake")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--new", type=int, default=0, help="new tokens per request (0: the workload's)")
    ap.add_argument("--max-batch-tokens", type=int, nargs="+", default=[512])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--check", action="store_true", help="compare split_equal with llama.cpp's micro-batches")
    ap.add_argument("--out", type=Path, default=None, help=f"write the JSON here (e.g. {RESULTS})")
    args = ap.parse_args()
    if args.check:
        if os.environ.get("LLAMA_BATCH_DEBUG") != "1":
            sys.exit("--check reads llama.cpp's micro-batches from its log: run it with LLAMA_BATCH_DEBUG=1")
        check()
        return
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result = {"settings": settings, "workloads": {name: workload(name, args) for name in args.workloads}}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
