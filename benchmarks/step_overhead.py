"""The CPU cost of one engine step with 8 concurrent greedy sequences, and of handing its events on.

The engine is driven in-process as `loop.AsyncEngine` drives it: requests added, then `step()` until
the work is done, each returned event routed to its request's stream the way the bridge does (a
finished request forgotten under a lock). `--model fake` runs the unit tests' stand-in
model (tests/unit/engine_fakes.py: no llama.cpp, so the figure is the engine's own Python per step);
`--model default` the default model on 1 thread (the whole step, llama_decode included). CPU time
(time.process_time), not wall time: the machine is shared; median of `--repeats` runs.

    .venv/bin/python benchmarks/step_overhead.py --model fake --repeats 11

Measured when the step came to return its events instead of calling each request's emit callback (2
cores shared with other jobs, load average 8-15; 8 greedy sequences of 200 tokens, 201 steps a run;
the two engines alternated, 5 x 21 runs each): fake model, callbacks 118.6 us per step (median; min
96.2, p25 107.1), returned events 107.7 us (min 96.9, p25 104.5): no loss, the difference is noise.
On the default model (48 tokens, 49 steps, 2 x 4 runs each) the step is llama_decode's: 112 ms median
with callbacks, 117 ms returned, its batches drifting 98-129 ms either way.

On the default model the part of a step outside llama_decode (printed beside it) is the engine's own
Python with sampling: 940 us a step of 8 greedy sequences (1 thread, 3 x 49 steps, load 6-8; about
1% of the step), of which about 450 us is the argmax over 8 fresh 262,144-entry logits rows (57 us a
row, the memory read) and about 110 us the rest of the engine (the fake model's figure). One argmax
over the 8 rows as a block measured 387 us against 454 us row by row (medians of 30 steps): 0.07 ms
of a 100 ms step, not worth a second sampling path.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmhost.engine import Engine, EngineConfig, GenerationEvent, GenerationRequest, SamplingParams


class Bridge:
    """What AsyncEngine does with the events a step returns: each goes to its request's stream (here a
    list), and a request's last event ends its route and forgets it under the bridge's lock."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.in_flight: dict[str, list[GenerationEvent]] = {}
        self.routes: dict[str, list[GenerationEvent]] = {}

    def add(self, request_id: str) -> None:
        self.in_flight[request_id] = self.routes[request_id] = []

    def deliver(self, events: list[GenerationEvent]) -> None:
        for event in events:
            if event.finished:
                stream = self.routes.pop(event.request_id)
                with self.lock:
                    self.in_flight.pop(event.request_id, None)
            else:
                stream = self.routes[event.request_id]
            stream.append(event)


class DecodeClock:
    """CPU seconds spent inside llama_decode (the default model's): the rest of a step is the engine's
    own Python, sampling included."""

    def __init__(self) -> None:
        import llama_cpp

        self.seconds = 0.0
        decode = llama_cpp.llama_decode

        def timed(ctx: object, batch: object) -> int:
            t0 = time.process_time()
            try:
                return int(decode(ctx, batch))
            finally:
                self.seconds += time.process_time() - t0

        llama_cpp.llama_decode = timed


def run(eng: Engine, prompts: list[list[int]], n: int) -> tuple[float, int, int]:
    """CPU seconds, steps and tokens of one batch of requests run to their end."""
    bridge = Bridge()
    streams = []
    for k, prompt in enumerate(prompts):
        params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
        eng.add(GenerationRequest(f"r{k}", prompt, params))
        bridge.add(f"r{k}")
        streams.append(bridge.routes[f"r{k}"])
    steps = 0
    t0 = time.process_time()
    while eng.has_work:
        bridge.deliver(eng.step())
        steps += 1
    cpu = time.process_time() - t0
    return cpu, steps, sum(len(e.token_ids) for stream in streams for e in stream)


def setup(model: str) -> tuple[Callable[[], Engine], list[list[int]]]:
    if model == "fake":
        from tests.unit.engine_fakes import FakeModel, config, engine_factory

        cfg = config(max_concurrent=8, max_batch_tokens=64, max_total_tokens=256)
        return (lambda: engine_factory(FakeModel(), cfg)), [[1 + k, 2 + k, 3 + k] for k in range(8)]
    from llmhost.engine import LlamaModel
    from llmhost.store import resolve_model

    cfg = EngineConfig(
        max_concurrent=8,
        max_total_tokens=256,
        max_input_tokens=128,
        max_batch_tokens=256,
        n_threads=1,
        prefix_cache_seqs=0,
        prompt_cache_mb=0,
    )
    llama = LlamaModel(resolve_model(), cfg)
    eng = Engine(llama, cfg)
    return (lambda: eng), [llama.tokenize(f"Story number {k}: once upon a time") for k in range(8)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["fake", "default"], default="fake")
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--tokens", type=int, default=200, help="new tokens per request")
    args = ap.parse_args()
    decode = DecodeClock() if args.model == "default" else None
    make, prompts = setup(args.model)
    per_step: list[float] = []
    outside: list[float] = []
    steps = tokens = 0
    for _ in range(args.repeats):
        before = decode.seconds if decode is not None else 0.0
        cpu, steps, tokens = run(make(), prompts, args.tokens)
        per_step.append(1e6 * cpu / steps)
        if decode is not None:
            outside.append(1e6 * (cpu - (decode.seconds - before)) / steps)
    runs = ", ".join(f"{v:.0f}" for v in per_step)
    print(
        f"{args.model}: {steps} steps, {tokens} tokens a run; CPU per step: median "
        f"{statistics.median(per_step):.1f} us, min {min(per_step):.1f} us (runs: {runs})"
    )
    if outside:
        print(
            f"outside llama_decode (the engine's Python, sampling included): median "
            f"{statistics.median(outside):.1f} us a step, min {min(outside):.1f} us"
        )


if __name__ == "__main__":
    main()
