"""Decode speed with prompt n-gram speculation against none, in the same run, on a workload that repeats
its prompt (summaries and edits quoting their input). Greedy; outputs are compared token for token.

Each mode loads the default model in-process, decodes every prompt alone (one sequence: decode speed is
what speculation changes), and reports llama.cpp-style eval rates (tokens after the first / time). Prints
JSON with medians and the speed-up (target: >= 1.5x with identical output).

    .venv/bin/python benchmarks/speculative_ngram.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
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

NEW_TOKENS = 96
INSTRUCTIONS = [
    "Repeat the text above exactly, word for word:\n",
    "Quote the first two sentences of the text above verbatim:\n",
    "Rewrite the text above, keeping its wording:\n",
]


def workload(n: int, chars: int = 600) -> list[str]:
    """`n` passages of the built-in prompt corpus, each followed by an instruction to quote it."""
    corpus = "\n\n".join(t for t, _ in builtin_prompts())
    step = max(1, (len(corpus) - chars) // n)
    texts = [corpus[i * step : i * step + chars] for i in range(n)]
    return [f"{text}\n\n{INSTRUCTIONS[i % len(INSTRUCTIONS)]}{text[:40]}" for i, text in enumerate(texts)]


def run(speculative: str, prompts: list[str], threads: int, draft_tokens: int) -> list[dict[str, Any]]:
    cfg = EngineConfig(
        max_concurrent=1,
        max_total_tokens=2048,
        max_input_tokens=1536,
        max_batch_tokens=512,
        n_threads=threads,
        flash_attn=True,
        speculative=speculative,
        draft_tokens=draft_tokens,
        prefix_cache_seqs=0,
        prompt_cache_mb=0,
    )
    model = LlamaModel(resolve_model(), cfg)
    engine = Engine(model, cfg)
    results = []
    for i, text in enumerate(prompts):
        events: list[GenerationEvent] = []
        params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
        engine.add(GenerationRequest(f"r{i}", model.tokenize(text), params))
        while engine.has_work:
            events += engine.step()
        t = events[-1].timings
        assert t is not None
        results.append(
            {
                "tokens": [tok for ev in events for tok in ev.token_ids],
                "eval_tokens_per_s": t.predicted_per_second,
                "draft_n": t.draft_n,
                "draft_n_accepted": t.draft_n_accepted,
            }
        )
    model.close()
    return results


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--draft-tokens", type=int, default=12)
    args = ap.parse_args()
    prompts = workload(args.prompts)
    base = run("", prompts, args.threads, args.draft_tokens)
    spec = run("ngram", prompts, args.threads, args.draft_tokens)
    identical = sum(a["tokens"] == b["tokens"] for a, b in zip(base, spec, strict=True))
    b_rate = statistics.median(r["eval_tokens_per_s"] for r in base)
    s_rate = statistics.median(r["eval_tokens_per_s"] for r in spec)
    drafted = sum(r["draft_n"] for r in spec)
    accepted = sum(r["draft_n_accepted"] for r in spec)
    print(
        json.dumps(
            {
                "machine": {"platform": platform.platform(), "threads": args.threads},
                "workload": {
                    "prompts": len(prompts),
                    "new_tokens": NEW_TOKENS,
                    "draft_tokens": args.draft_tokens,
                },
                "eval_tokens_per_s_median": {"none": round(b_rate, 2), "ngram": round(s_rate, 2)},
                "speedup": round(s_rate / b_rate, 3),
                "identical_outputs": f"{identical}/{len(prompts)}",
                "acceptance_rate": round(accepted / drafted, 3) if drafted else None,
                # where outputs differ, the step of the first different token (batch-shape arithmetic: the
                # engine's tests prove such a flip happens only at a near tie)
                "first_divergence": [
                    first_difference(a["tokens"], b["tokens"]) for a, b in zip(base, spec, strict=True)
                ],
                "per_prompt_speedup": [
                    round(s["eval_tokens_per_s"] / b["eval_tokens_per_s"], 2)
                    for b, s in zip(base, spec, strict=True)
                ],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
