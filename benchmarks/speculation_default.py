"""Whether n-gram speculation can be on by default: decode speed with it off, with a fixed draft length
and with the adaptive draft length, in the same run, on prompts whose answers quote them and on the
built-in realistic prompts (questions, chores, code: little to quote), at concurrency 1 and 8.

Each mode loads the default model in-process. Concurrency 1 decodes every prompt alone; concurrency C
submits C prompts at once to one engine. Greedy; outputs are compared token for token with "off".
Reported per mode: the median llama.cpp-style eval rate of the requests (tokens after the first /
their time) and the output tokens/s over the whole run; the ratio to "off" of both. The goals of the
default: >= 1.5x where the output quotes the input, >= 0.98x where nothing matches, identical output.

    .venv/bin/python benchmarks/speculation_default.py --threads 2 --prompts 4 --concurrency 1 8
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

from llmhost.bench.load.workload import builtin_prompts
from llmhost.engine import (
    Engine,
    EngineConfig,
    GenerationEvent,
    GenerationRequest,
    LlamaModel,
    SamplingParams,
)
from llmhost.store import resolve_model

NEW_TOKENS = 64
MODES = {"off": ("", False), "fixed": ("ngram", False), "adaptive": ("ngram", True)}


def quoting(n: int, chars: int = 600) -> list[str]:
    """`n` passages of the built-in corpus, each followed by an instruction to repeat it."""
    corpus = "\n\n".join(t for t, _ in builtin_prompts())
    step = max(1, (len(corpus) - chars) // n)
    texts = [corpus[i * step : i * step + chars] for i in range(n)]
    return [f"{text}\n\nRepeat the text above exactly, word for word:\n{text[:40]}" for text in texts]


def plain(n: int) -> list[str]:
    """The first `n` built-in prompts, as a user sends them."""
    return [t for t, _ in builtin_prompts()][:n]


def run(mode: str, prompts: list[str], threads: int, concurrency: int) -> dict[str, Any]:
    speculative, adaptive = MODES[mode]
    cfg = EngineConfig(
        max_concurrent=concurrency,
        max_total_tokens=2048,
        max_input_tokens=1536,
        max_batch_tokens=512,
        n_threads=threads,
        flash_attn=True,
        speculative=speculative,
        adaptive_draft=adaptive,
        prefix_cache_seqs=0,
        prompt_cache_mb=0,
    )
    model = LlamaModel(resolve_model(), cfg)
    engine = Engine(model, cfg)
    events: list[list[GenerationEvent]] = [[] for _ in prompts]
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    # untimed warm-up: the first mode would otherwise pay for paging in the weights
    engine.add(GenerationRequest("warm-up", model.tokenize(prompts[0]), params))
    while engine.has_work:
        engine.step()
    start = time.perf_counter()
    for first in range(0, len(prompts), concurrency):
        for i in range(first, min(first + concurrency, len(prompts))):
            engine.add(GenerationRequest(f"r{i}", model.tokenize(prompts[i]), params))
        while engine.has_work:
            for event in engine.step():
                events[int(event.request_id[1:])].append(event)
    wall = time.perf_counter() - start
    model.close()
    timings = [ev[-1].timings for ev in events]
    assert all(t is not None for t in timings)
    return {
        "tokens": [[tok for e in ev for tok in e.token_ids] for ev in events],
        "eval_per_s": statistics.median(t.predicted_per_second for t in timings if t is not None),
        "output_per_s": sum(t.predicted_n for t in timings if t is not None) / wall,
        "draft_n": sum(t.draft_n for t in timings if t is not None),
        "accepted": sum(t.draft_n_accepted for t in timings if t is not None),
    }


def compare(prompts: list[str], threads: int, concurrency: int, rounds: int) -> dict[str, Any]:
    """Every mode once per round, rounds interleaved; rates are medians over the rounds, outputs and
    draft counts the first round's."""
    per_mode: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            per_mode[mode].append(r := run(mode, prompts, threads, concurrency))
            # progress on stderr: a long run cut short still says what it measured
            rates = f"eval {r['eval_per_s']:.2f} tok/s, output {r['output_per_s']:.2f} tok/s"
            print(
                f"c={concurrency} {mode}: {rates}, drafted {r['draft_n']}, accepted {r['accepted']}",
                file=sys.stderr,
                flush=True,
            )
    runs = {mode: per_mode[mode][0] for mode in MODES}
    for mode, r in runs.items():
        for key in ("eval_per_s", "output_per_s"):
            r[key] = statistics.median(x[key] for x in per_mode[mode])
    off = runs["off"]
    out: dict[str, Any] = {}
    for mode, r in runs.items():
        out[mode] = {
            "eval_tokens_per_s_median": round(r["eval_per_s"], 2),
            "output_tokens_per_s": round(r["output_per_s"], 2),
            "eval_ratio_to_off": round(r["eval_per_s"] / off["eval_per_s"], 3),
            "output_ratio_to_off": round(r["output_per_s"] / off["output_per_s"], 3),
            "identical_outputs": (
                f"{sum(a == b for a, b in zip(off['tokens'], r['tokens'], strict=True))}/{len(prompts)}"
            ),
            "acceptance_rate": round(r["accepted"] / r["draft_n"], 3) if r["draft_n"] else None,
            "draft_tokens": r["draft_n"],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=8, help="prompts per workload and concurrency")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every mode (medians)")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    for c in args.concurrency:
        n = max(args.prompts, c)
        results[f"concurrency_{c}"] = {
            "quoting": compare(quoting(n), args.threads, c, args.rounds),
            "not_quoting": compare(plain(n), args.threads, c, args.rounds),
        }
    print(
        json.dumps(
            {
                "machine": {"platform": platform.platform(), "threads": args.threads},
                "workload": {
                    "new_tokens": NEW_TOKENS,
                    "prompts": args.prompts,
                    "modes": list(MODES),
                    "rounds": args.rounds,
                },
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
