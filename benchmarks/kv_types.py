"""The KV cache's types and sliding-window handling: memory, quality and decode speed.

For each KV setting (`--cache-type-k/-v`, `--swa-full` or not), in-process on the default model:

- memory: the MiB of KV llama.cpp allocates at `llmhost serve`'s defaults (8 running + 8 idle cached
  sequences x 4,096 tokens), and this process's RSS after loading and decoding `--seqs` sequences of
  `--long` tokens (it grows with each setting's first use of its buffers, so each setting is measured
  in a fresh process);
- quality against f16 (full-size caches only: a windowed cache computes the same attention):
  perplexity on the shipped evaluation text (llmhost/optimize/data/sample.txt, 1,024-token windows) and
  teacher-forced top-1 agreement with f16's greedy continuations of optimize's eight prompts (64 each);
- speed: a decode step of 1 and of `--seqs` sequences at `--short` and `--long` tokens of context
  (llama_decode only, median of `--repeats` after 2 warm-up steps; benchmarks/decode_widths.py's method).

    .venv/bin/python benchmarks/kv_types.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from llmhost.engine import EngineConfig, LlamaModel
from llmhost.optimize.quality import PROMPTS, greedy_agreement, perplexity
from llmhost.store import resolve_model

sys.path.insert(0, str(Path(__file__).parent))
from decode_widths import Streams

RESULTS = Path(__file__).parent / "results" / "kv_types.json"
SETTINGS = [  # (K, V, sliding-window layers in full)
    ("f16", "f16", True),
    ("q8_0", "q8_0", True),
    ("q4_0", "q4_0", True),
    ("f16", "f16", False),
    ("q8_0", "q8_0", False),
]


def config(k: str, v: str, swa_full: bool, **limits: int) -> EngineConfig:
    return EngineConfig(cache_type_k=k, cache_type_v=v, swa_full=swa_full, flash_attn=True, **limits)


def serve_default_kv_mib(k: str, v: str, swa_full: bool) -> float:
    model = LlamaModel(resolve_model(), config(k, v, swa_full))
    mib = model.kv_mib
    model.close()
    return round(mib, 1)


def quality(k: str, v: str, threads: int) -> dict[str, Any]:
    limits = {
        "max_concurrent": 1,
        "prefix_cache_seqs": 0,
        "max_total_tokens": 1024,
        "max_input_tokens": 1023,
        "max_batch_tokens": 64,
        "n_threads": threads,
    }
    model = LlamaModel(resolve_model(), config(k, v, True, **limits))
    base = LlamaModel(resolve_model(), config("f16", "f16", True, **limits))
    try:
        ppl = perplexity(model, window=1024)
        agree = greedy_agreement(model, base, PROMPTS, n_tokens=64)
    finally:
        model.close()
        base.close()
    return {
        "perplexity": round(ppl.perplexity, 4),
        "tokens_scored": ppl.tokens_scored,
        "top1_agreement_with_f16": round(agree.agreement, 4),
        "agreement_tokens": agree.tokens,
    }


def speed_and_rss(k: str, v: str, swa_full: bool, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for context in (args.short, args.long):
        limits = {
            "max_concurrent": args.seqs,
            "prefix_cache_seqs": 0,
            "max_total_tokens": context + 64,
            "max_input_tokens": context,
            "n_threads": args.threads,
        }
        model = LlamaModel(resolve_model(), config(k, v, swa_full, **limits))
        try:
            streams = Streams(model, args.seqs, context, seed=0)
            out[f"decode_1_seq_at_{context}_ms"] = streams.median_ms([0], args.repeats)
            out[f"decode_{args.seqs}_seqs_at_{context}_ms"] = streams.median_ms(
                list(range(args.seqs)), args.repeats
            )
            if context == args.long:
                out[f"rss_mib_after_{args.seqs}_seqs_at_{context}"] = round(
                    psutil.Process().memory_info().rss / 2**20
                )
        finally:
            model.close()
    return out


def one_setting(k: str, v: str, swa_full: bool, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"cache_type_k": k, "cache_type_v": v, "swa_full": swa_full}
    row.update(speed_and_rss(k, v, swa_full, args))
    row["serve_default_kv_mib"] = serve_default_kv_mib(k, v, swa_full)
    if swa_full:
        row.update(quality(k, v, args.threads))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--short", type=int, default=256, help="Context tokens of the short measurement.")
    ap.add_argument("--long", type=int, default=2048, help="Context tokens of the long measurement.")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--one", nargs=3, metavar=("K", "V", "SWA_FULL"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.one:  # a child: one setting in a fresh process, its row on stdout
        k, v, full = args.one
        print(json.dumps(one_setting(k, v, full == "1", args)))
        return
    rows = []
    for k, v, full in SETTINGS:
        child = [
            sys.executable,
            __file__,
            "--one",
            k,
            v,
            str(int(full)),
            "--threads",
            str(args.threads),
            "--seqs",
            str(args.seqs),
            "--short",
            str(args.short),
            "--long",
            str(args.long),
            "--repeats",
            str(args.repeats),
        ]
        done = subprocess.run(child, check=True, capture_output=True, text=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "machine": {"cpus": args.threads, "platform": platform.platform(), "processor": platform.processor()},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "one"},
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
