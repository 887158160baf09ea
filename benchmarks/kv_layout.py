"""What llama.cpp's KV layout costs a step: one buffer shared by every sequence (`kv_unified`, what
llmhost uses: a prefix is shared by tagging cells) against one stream per sequence (what llama-server
uses by default: copies between sequences copy a whole stream).

The default model is loaded in-process twice, once per layout, with the KV size the conversations
benchmark gives both servers' sequences. In each, `--seqs` sequences of `--context` tokens are
computed the way a server computes them (a prompt each, then decoded side by side, so their cells
interleave), plus `--others` idle sequences of the same length (a prefix cache's conversations).
Timed, median of `--repeats` (llama_decode only):

- `decode`: one token for each of the `--seqs` sequences;
- `decode+prefill N`: the same step with an N-token prompt chunk of another sequence in it;
- `prefill N alone`: that chunk in a step of its own.

With one buffer, attention scans every cell in use, every sequence's, for every token; with streams,
only the cells of its own sequence. A stream batch is split where sequence ids are not consecutive
(llama.cpp's `split_equal(sequential)`), so streams are measured with consecutive ids here.

    .venv/bin/python benchmarks/kv_layout.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import llama_cpp as lc

from llmhost.bench.load.workload import builtin_prompts
from llmhost.engine import EngineConfig, LlamaModel
from llmhost.engine.kv.prefix_cache import KvTrim
from llmhost.engine.llamacpp import model as llama_module
from llmhost.store import resolve_model

RESULTS = Path(__file__).parent / "results" / "kv_layout.json"


def load(unified: bool, args: argparse.Namespace) -> LlamaModel:
    """The model with the KV layout asked for: llmhost's context parameters, kv_unified overridden."""
    n_seqs = args.seqs + args.others + 1
    cfg = EngineConfig(
        max_concurrent=n_seqs,
        max_total_tokens=args.context + 512,
        max_input_tokens=args.context + 256,
        n_threads=args.threads,
        prefix_cache_seqs=0,
        prompt_cache_mb=0,
    )
    create = lc.llama_init_from_model

    def with_layout(model: Any, cparams: Any) -> Any:
        cparams.kv_unified = unified
        return create(model, cparams)

    llama_module.lc.llama_init_from_model = with_layout
    try:
        return LlamaModel(resolve_model(args.model), cfg)
    finally:
        llama_module.lc.llama_init_from_model = create


def fill(model: LlamaModel, text: list[int], args: argparse.Namespace) -> None:
    """The idle sequences' prompts, then the decoding ones' first half, then both halves side by side."""
    ctx = args.context
    first = args.seqs
    for s in range(first, first + args.others):
        for off in range(0, ctx, 256):
            model.decode([(text[s * ctx + off : s * ctx + min(ctx, off + 256)], off, s, 0)])
    half = ctx // 2
    for s in range(args.seqs):
        for off in range(0, half, 256):
            model.decode([(text[s * ctx + off : s * ctx + min(half, off + 256)], off, s, 0)])
    for p in range(half, ctx, 16):
        model.decode([(text[s * ctx + p : s * ctx + p + 16], p, s, 0) for s in range(args.seqs)])


def timed(model: LlamaModel, items: list[tuple[list[int], int, int, int]], undo: list[KvTrim]) -> float:
    t0 = time.perf_counter()
    model.decode(items)
    seconds = time.perf_counter() - t0
    for op in undo:
        model.apply(op)
    return seconds


def measure(unified: bool, args: argparse.Namespace) -> dict[str, float]:
    model = load(unified, args)
    text = model.tokenize(" ".join(t for t, _ in builtin_prompts()) * 200, add_special=False)
    fill(model, text, args)
    ctx, chunk_seq = args.context, args.seqs + args.others
    decode = [([text[s]], ctx, s, 1) for s in range(args.seqs)]
    undo = [KvTrim(s, ctx) for s in range(args.seqs)]
    out: dict[str, float] = {}

    def median_ms(items: list[tuple[list[int], int, int, int]], undo: list[KvTrim]) -> float:
        return round(1000 * statistics.median(timed(model, items, undo) for _ in range(args.repeats)), 1)

    out["decode"] = median_ms(decode, undo)
    for n in args.chunks:
        chunk = (text[-n:], 0, chunk_seq, 1)
        out[f"decode+prefill {n}"] = median_ms([*decode, chunk], [*undo, KvTrim(chunk_seq, 0)])
        out[f"prefill {n} alone"] = median_ms([chunk], [KvTrim(chunk_seq, 0)])
    model.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=8, help="Sequences decoding side by side.")
    ap.add_argument("--others", type=int, default=4, help="Idle sequences kept in the KV.")
    ap.add_argument("--context", type=int, default=800, help="Tokens each sequence holds.")
    ap.add_argument("--chunks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    layouts = {"unified": measure(True, args), "streams": measure(False, args)}
    ratio = {k: round(layouts["streams"][k] / v, 3) for k, v in layouts["unified"].items()}
    doc = {
        "machine": {"platform": platform.platform(), "threads": args.threads},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "step_ms": layouts,
        "streams/unified": ratio,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    text = json.dumps(doc, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
