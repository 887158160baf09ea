"""What serving several LoRA adapters from one copy costs: the same 8 greedy requests decoded all on the
base model, all on one adapter, and spread over the base and 3 adapters (2 each).

llama.cpp applies adapters per context, so a step carries the sequences of one adapter set and the sets
take turns: with 4 sets busy, a step decodes 2 sequences instead of 8. The engine is driven in-process
(no HTTP); adapters are random rank-4 updates of every attention query weight (tests' layout).

    .venv/bin/python benchmarks/lora_mix.py --threads 2

Measured once, 16 tokens each, on a 2-core machine shared with other jobs (load average 12, so the
seconds are rough; the steps are exact): base x8 21.3 s in 16 steps (6.0 tok/s), one adapter x8 37.2 s
in 16 steps (3.4 tok/s), base + 3 adapters x2 50.4 s in 64 steps (2.5 tok/s): each set's pair advances
every fourth step.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmhost.engine import Engine, EngineConfig, GenerationRequest, LlamaModel, SamplingParams
from llmhost.engine.lora import AdapterSpec
from llmhost.store import resolve_model
from tests.integration.lora_helpers import write_adapter


def run(
    eng: Engine, sets: list[tuple[tuple[str, float], ...]], prompt: list[int], n: int
) -> dict[str, float]:
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    steps0 = eng.steps
    t0 = time.perf_counter()
    for i, chosen in enumerate(sets):
        eng.add(GenerationRequest(f"r{time.monotonic_ns()}-{i}", [*prompt, i + 10], params, adapters=chosen))
    while eng.has_work:
        eng.step()
    seconds = time.perf_counter() - t0
    return {
        "seconds": round(seconds, 2),
        "steps": eng.steps - steps0,
        "tok_s": round(len(sets) * n / seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    base = Path(resolve_model())
    with tempfile.TemporaryDirectory() as tmp:
        specs = tuple(
            AdapterSpec(f"a{i}", str(write_adapter(Path(tmp) / f"a{i}.gguf", base, i))) for i in (1, 2, 3)
        )
        cfg = EngineConfig(
            max_concurrent=8,
            max_total_tokens=256,
            max_input_tokens=128,
            max_batch_tokens=256,
            n_threads=args.threads,
            prefix_cache_seqs=0,
            prompt_cache_mb=0,
            adapters=specs,
        )
        eng = Engine(LlamaModel(base, cfg), cfg)
        prompt = eng.model.tokenize("Write a short story about a lighthouse keeper and the sea.")
        one = (("a1", 1.0),)
        mixes = {
            "base x8": [()] * 8,
            "one adapter x8": [one] * 8,
            "base + 3 adapters x2": [(), one, (("a2", 1.0),), (("a3", 1.0),)] * 2,
        }
        run(eng, [()], prompt, 4)  # warm-up
        out = {name: run(eng, sets, prompt, args.tokens) for name, sets in mixes.items()}
        eng.close()
    print(json.dumps({"threads": args.threads, "tokens_each": args.tokens, "results": out}, indent=2))


if __name__ == "__main__":
    main()
