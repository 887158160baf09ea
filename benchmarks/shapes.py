"""llmhost against llama.cpp's llama-server at real model shapes: random-weight Q4_K_M GGUFs at the
dimensions of Qwen2.5 0.5B, Llama 3.2 1B and 3B (and Llama 3.1 8B with `--shapes llama3.1-8b`), each
server in turn on the same file, threads, context and slots.

The cost of a forward pass is the shape's whatever the weights, so these stand in for the real models
without downloading them. Each GGUF is written by tests/tinymodels.py's `build_shaped_gguf` (F16,
normal weights of std 0.02, the shape table below, SmolLM2's BPE tokenizer padded with filler tokens to
the model's vocabulary size: prompts tokenize to SmolLM2's lengths, the output layer is the model's
width), quantized with llama.cpp's `llama-quantize ... Q4_K_M` (the F16 file is deleted), checked to
load and give finite logits in llama-cpp-python, and kept in `--cache-dir` under a name keyed by the
shape, so a second run starts measuring at once (the build's seconds are kept beside it). Qwen2.5
0.5B's width (896) is not a multiple of 256: llama-quantize falls back to Q5_0/Q8_0 for its matrices,
as it does for the published Q4_K_M files of that model.

Per shape and KV type (`--cache-types`, default f16): llmhost `serve --max-concurrent N
--max-total-tokens C` and llama-server `-np N -c N*C`, both `--threads T` (defaults: N 8, C 2048, T 2),
started `--rounds` times each, interleaved. Each run: `--prompt-tokens`-token prompts with distinct
starts (64 by default, measured with the server's tokenizer), `--new-tokens` greedy tokens each (64,
EOS ignored), closed loop at concurrency 1 (4 requests) and at N (2N requests), one warm-up request per
level; then the server's RSS with its children. The Llama 3.1 8B shape is measured at concurrency 1
only (memory and one user's speed). Reported per server: output tokens/s, TTFT p50 and ITL p50 at each
level and the RSS, as medians over the rounds; llmhost / llama-server of each, as the median of the
per-round ratios with its range.

The floor: each server is also started once with llama.cpp's log on (llmhost `--log-level debug`,
llama-server `-lv 4`) and the buffers llama.cpp logs are read (mapped weights, their repacked copy,
output, KV and compute buffers, as benchmarks/memory_peer.py reads them): `floor_mb` is their sum,
`rss_over_floor_mb` what the server holds beyond it after the load. llmhost's KV buffer covers its
idle cached sequences too, so its floor is above llama-server's at the same slots.

    .venv/bin/python benchmarks/shapes.py                     # the three small shapes, 2 rounds
    .venv/bin/python benchmarks/shapes.py --shapes qwen2.5-0.5b --rounds 1
    .venv/bin/python benchmarks/shapes.py --shapes llama3.1-8b --cache-types f16,q8_0
    .venv/bin/python benchmarks/shapes.py --shapes llama3.2-1b --build-only   # fill the cache only
    .venv/bin/python benchmarks/shapes.py --table benchmarks/results/shapes*.json  # the docs' KV table

A 2-core host decodes the 3B shape at about 5-8 tokens/s: the default run takes about half an hour
there, plus the first builds (seconds to minutes per shape; the 8B one needs 16 GB of disk for its F16
file while it is quantized).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from memory_peer import MB, llama_cpp_buffers, rss_mb
from serve_compare import WARMUP, Running, measure, server_commands, write_prompts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llmhost.bench.load.workload import Tokenizer, synthetic_workload
from tests.tinymodels import Dims, build_shaped_gguf, shaped_parameter_count

LLAMA_BIN = Path("/work/peer/src/llama.cpp/build/bin")
SERVERS = ("llmhost", "llama-server")
QUANT = "Q4_K_M"
STD = 0.02
# bump when build_shaped_gguf writes different bytes for the same shape: cached files are keyed by it
BUILD_VERSION = 1


@dataclass(frozen=True)
class Shape:
    source: str  # the Hugging Face repository whose config.json gives the dimensions
    arch: str  # llama.cpp's architecture
    dims: Dims
    one_user_only: bool = False  # measured at concurrency 1 only


# From each repository's config.json: num_hidden_layers, hidden_size, num_attention_heads,
# num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings, max_position_embeddings,
# rope_theta, rms_norm_eps and rope_scaling (Llama 3's: factor, low_freq_factor, high_freq_factor,
# original_max_position_embeddings)
_LLAMA32_ROPE = (32.0, 1.0, 4.0, 8192)
SHAPES: dict[str, Shape] = {
    "qwen2.5-0.5b": Shape(
        "Qwen/Qwen2.5-0.5B",
        "qwen2",
        Dims(24, 896, 14, 2, 4864, 151936, tied=True, n_ctx_train=32768, rope_theta=1e6, rms_eps=1e-6),
    ),
    "llama3.2-1b": Shape(
        "meta-llama/Llama-3.2-1B",
        "llama",
        Dims(16, 2048, 32, 8, 8192, 128256, True, 131072, 500000.0, 1e-5, _LLAMA32_ROPE),
    ),
    "llama3.2-3b": Shape(
        "meta-llama/Llama-3.2-3B",
        "llama",
        Dims(28, 3072, 24, 8, 8192, 128256, True, 131072, 500000.0, 1e-5, _LLAMA32_ROPE),
    ),
    "llama3.1-8b": Shape(
        "meta-llama/Llama-3.1-8B",
        "llama",
        Dims(32, 4096, 32, 8, 14336, 128256, False, 131072, 500000.0, 1e-5, (8.0, 1.0, 4.0, 8192)),
        one_user_only=True,
    ),
}
DEFAULT_SHAPES = ("qwen2.5-0.5b", "llama3.2-1b", "llama3.2-3b")


def hparams(shape: Shape) -> dict[str, Any]:
    """What the GGUF of `shape` declares, with its head size and parameter count (the JSON's record of
    what was measured)."""
    d = shape.dims
    return {
        "source": shape.source,
        "arch": shape.arch,
        **asdict(d),
        "head_dim": d.head_dim,
        "parameters": shaped_parameter_count(shape.arch, d),
    }


def cache_name(key: str, shape: Shape) -> str:
    """The cached file's name: the shape's key and a digest of everything the bytes depend on."""
    blob = json.dumps([shape.arch, asdict(shape.dims), STD, QUANT, BUILD_VERSION], sort_keys=True)
    return f"{key}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}.{QUANT}.gguf"


def check_generates(path: Path) -> dict[str, Any]:
    """Load in llama-cpp-python, decode a prompt and 8 greedy tokens: the logits must be finite."""
    import llama_cpp

    llm = llama_cpp.Llama(str(path), n_ctx=256, n_threads=2, verbose=False)
    try:
        prompt = llm.tokenize(b"The quick brown fox jumps over the lazy dog.")
        llm.eval(prompt)
        finite = bool(np.isfinite(np.asarray(llm.eval_logits[-1])).all())
        out = llm.create_completion("Once upon a time", max_tokens=8, temperature=0.0)
        text = out["choices"][0]["text"]  # type: ignore[index]
        tokens = out["usage"]["completion_tokens"]  # type: ignore[index]
    finally:
        llm.close()
    if not finite or tokens != 8:
        raise RuntimeError(f"{path}: logits finite {finite}, {tokens} tokens generated")
    return {"finite_logits": finite, "sample": text}


def ensure_gguf(key: str, shape: Shape, cache_dir: Path, quantize: Path) -> tuple[Path, dict[str, Any]]:
    """The cached Q4_K_M file of `shape`, built first where missing; and its build record."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / cache_name(key, shape)
    record_path = out.with_suffix(".json")
    if out.exists() and record_path.exists():
        return out, json.loads(record_path.read_text())
    f16 = out.with_name(out.name.replace(QUANT, "F16") + ".partial")
    part = out.with_name(out.name + ".partial")
    try:
        t0 = time.monotonic()
        build_shaped_gguf(f16, shape.arch, shape.dims, std=STD)
        t1 = time.monotonic()
        threads = str(len(os.sched_getaffinity(0)))
        log = subprocess.run(
            [str(quantize), str(f16), str(part), QUANT, threads], capture_output=True, text=True
        )
        if log.returncode != 0:
            raise RuntimeError(f"llama-quantize failed:\n{log.stdout[-2000:]}{log.stderr[-2000:]}")
        t2 = time.monotonic()
        f16_mb = round(f16.stat().st_size / MB, 1)
    finally:
        f16.unlink(missing_ok=True)
    check = check_generates(part)
    part.rename(out)
    record = {
        "file": out.name,
        "f16_mb": f16_mb,
        "size_mb": round(out.stat().st_size / MB, 1),
        "build_f16_s": round(t1 - t0, 1),
        "quantize_s": round(t2 - t1, 1),
        "fallback_tensors": sum("falling back" in line for line in (log.stdout + log.stderr).splitlines()),
        "check": check,
    }
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return out, record


@dataclass(frozen=True)
class Settings:
    threads: int
    max_concurrent: int
    ctx_per_seq: int
    prompt_tokens: int
    new_tokens: int
    rounds: int
    llama_server: str

    def levels(self, shape: Shape) -> list[int]:
        return [1] if shape.one_user_only else [1, self.max_concurrent]


def level_requests(conc: int) -> int:
    return 4 if conc == 1 else 2 * conc


def commands(model: Path, s: Settings, kv: str, probe: bool) -> dict[str, list[str]]:
    """Both servers' command lines (serve_compare's), at KV type `kv`; `probe`: with llama.cpp's log."""
    cache = ["--cache-type-k", kv, "--cache-type-v", kv]
    cmds = server_commands(
        model,
        s.threads,
        s.max_concurrent,
        s.ctx_per_seq,
        extra=cache,
        peer_extra=[*cache, *(["-lv", "4"] if probe else [])],
        llama_server=s.llama_server,
    )
    if probe:  # llmhost passes llama.cpp's lines to its log at debug level only
        lh = cmds["llmhost"]
        lh[lh.index("--log-level") + 1] = "debug"
    return {name: cmds[name] for name in SERVERS}


def floors(model: Path, s: Settings, kv: str) -> dict[str, Any]:
    """Each server's llama.cpp buffers (MiB, as logged) and their sum in MB, from one start each."""
    out: dict[str, Any] = {}
    for name, cmd in commands(model, s, kv, probe=True).items():
        server = Running(name, cmd)
        try:
            server.wait_ready()
        finally:
            server.stop()
        mib = llama_cpp_buffers(server.log)
        out[name] = {"buffers_mib": mib, "floor_mb": round(sum(mib.values()) * 2**20 / MB, 1)}
    return out


async def make_prompts(url: str, work: Path, levels: list[int], prompt_tokens: int) -> dict[int, Path]:
    """Every level's prompts, none sent twice in a run (a server's prompt cache must not answer them)."""
    needed = [level_requests(c) + WARMUP for c in levels]
    workload = await synthetic_workload(prompt_tokens, sum(needed), Tokenizer(url))
    texts = [p.text for p in workload.prompts]
    files: dict[int, Path] = {}
    start = 0
    for c, n in zip(levels, needed, strict=True):
        files[c] = write_prompts(work / f"c{c}.jsonl", texts[start : start + n])
        start += n
    return files


def run_server(
    name: str, cmd: list[str], s: Settings, levels: list[int], work: Path, files: dict[int, Path]
) -> tuple[dict[str, Any], dict[int, Path]]:
    """One start of `name`: every level, then its RSS. The prompts are made on the first start."""
    server = Running(name, cmd)
    try:
        server.wait_ready()
        if not files:
            files = asyncio.run(make_prompts(server.url, work, levels, s.prompt_tokens))
        result: dict[str, Any] = {
            f"c{c}": measure(server.url, files[c], c, s.new_tokens, 0.0, requests=level_requests(c))
            for c in levels
        }
        time.sleep(1.0)
        result["rss_mb"] = rss_mb(server.proc.pid)
    finally:
        server.stop()
    return result, files


# per level, the figures reported; "rss_mb" besides
FIGURES = ("output_tokens_per_s", "ttft_ms_p50", "itl_ms_p50")


def _figures(run: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {
        f"{level}_{f}": run[level].get(f)
        for level in sorted((k for k in run if k.startswith("c")), key=lambda k: int(k[1:]))
        for f in FIGURES
    }
    out["rss_mb"] = run["rss_mb"]
    return out


def _failed(run: dict[str, Any]) -> int:
    return sum(sum(run[k].get("errors", {}).values()) for k in run if k.startswith("c"))


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def summarise(rounds: list[dict[str, Any]], floor: dict[str, Any] | None = None) -> dict[str, Any]:
    """Medians over the rounds per server; llmhost / llama-server of each figure, median of the
    per-round ratios and its range; each server's RSS beyond its llama.cpp buffers."""
    per_server = {name: [_figures(r[name]) for r in rounds if name in r] for name in SERVERS}
    medians = {
        name: {k: _median([f[k] for f in figs]) for k in figs[0]} for name, figs in per_server.items() if figs
    }
    ratios: dict[str, Any] = {}
    if len(medians) == len(SERVERS):
        pairs = [(_figures(r["llmhost"]), _figures(r["llama-server"])) for r in rounds if len(r) == 2]
        for k in medians["llmhost"]:
            values = [round(a / b, 3) for ours, theirs in pairs if (a := ours[k]) and (b := theirs[k])]
            ratios[k] = {
                "median": _median(list(values)),
                "min": min(values, default=None),
                "max": max(values, default=None),
            }
    failed = {name: sum(_failed(r[name]) for r in rounds if name in r) for name in medians}
    out: dict[str, Any] = {"medians": medians, "llmhost/llama-server": ratios, "failed_requests": failed}
    if floor:
        out["rss_over_floor_mb"] = {
            name: round(m["rss_mb"] - floor[name]["floor_mb"], 1)
            for name, m in medians.items()
            if name in floor and m.get("rss_mb") is not None
        }
    return out


def measure_shape(model: Path, shape: Shape, s: Settings, kv: str, work: Path) -> dict[str, Any]:
    levels = s.levels(shape)
    floor = floors(model, s, kv)
    cmds = commands(model, s, kv, probe=False)
    rounds: list[dict[str, Any]] = []
    files: dict[int, Path] = {}
    for r in range(s.rounds):
        results: dict[str, Any] = {}
        for name in SERVERS:
            results[name], files = run_server(name, cmds[name], s, levels, work, files)
            print(f"# {model.name} {kv} round {r + 1}: {name} {results[name]}", file=sys.stderr, flush=True)
        rounds.append(results)
    return {"levels": levels, "floor": floor, **summarise(rounds, floor), "rounds": rounds}


def merged(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several results files as one (a later file's shape over an earlier one's): runs of their own, the
    8B shape's for one, made at the same slots and context, which the table's header names."""
    first = docs[0]["settings"]
    for doc in docs[1:]:
        for key in ("max_concurrent", "ctx_per_seq"):
            if doc["settings"][key] != first[key]:
                raise ValueError(f"results made at {key} {doc['settings'][key]} and {first[key]}: one table")
    return {**docs[0], "shapes": {k: e for doc in docs for k, e in doc["shapes"].items()}}


def kv_table(doc: dict[str, Any]) -> str:
    """The docs' measured memory table from a results file: llama.cpp's f16 KV buffer at the run's slots
    and context (llama-server's log) and what it makes a token, the Q4_K_M file, and both servers' RSS
    after the load at each KV type measured."""
    kvs = sorted({kv for e in doc["shapes"].values() for kv in e["kv"]}, key=lambda k: (k != "f16", k))
    slots, ctx = doc["settings"]["max_concurrent"], doc["settings"]["ctx_per_seq"]
    head = ["shape", f"KV buffer, {slots} × {ctx:,} f16", "a token", "Q4_K_M file"]
    head += [f"RSS, {kv} KV (llmhost / llama-server)" for kv in kvs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, e in doc["shapes"].items():
        if "f16" not in e["kv"]:
            continue
        kv_mib = e["kv"]["f16"]["floor"]["llama-server"]["buffers_mib"]["kv"]
        rss = []
        for kv in kvs:
            m = e["kv"].get(kv, {}).get("medians", {})
            ours, theirs = m.get("llmhost", {}).get("rss_mb"), m.get("llama-server", {}).get("rss_mb")
            rss.append(f"{ours:,.0f} / {theirs:,.0f} MB" if ours and theirs else "-")
        per_token = kv_mib * 2**20 / (slots * ctx) / 1024
        row = [SHAPES[key].source.split("/")[1], f"{kv_mib:,.0f} MiB", f"{per_token:g} KiB"]
        row += [f"{e['gguf']['size_mb']:,.0f} MB", *rss]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help=f"Of: {', '.join(SHAPES)}.")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cache-types", default="f16", help="KV cache types, each a row (f16, q8_0, ...).")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-concurrent", type=int, default=8, help="llmhost's; llama-server's -np.")
    ap.add_argument("--ctx-per-seq", type=int, default=2048, help="Context of each sequence.")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "llmhost-shapes")
    ap.add_argument("--llama-bin", type=Path, default=LLAMA_BIN, help="llama-server's and llama-quantize's.")
    ap.add_argument("--build-only", action="store_true", help="Build the GGUFs into the cache and stop.")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "shapes.json")
    ap.add_argument(
        "--table", type=Path, nargs="+", help="Print the docs' KV table from these results files and stop."
    )
    args = ap.parse_args()
    if args.table:
        print(kv_table(merged([json.loads(path.read_text()) for path in args.table])))
        return
    keys = args.shapes.split(",")
    unknown = [k for k in keys if k not in SHAPES]
    if unknown:
        ap.error(f"unknown shapes {unknown}: choose of {', '.join(SHAPES)}")
    s = Settings(
        threads=args.threads,
        max_concurrent=args.max_concurrent,
        ctx_per_seq=args.ctx_per_seq,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        rounds=args.rounds,
        llama_server=str(args.llama_bin / "llama-server"),
    )
    doc: dict[str, Any] = {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform()},
        "settings": {
            **asdict(s),
            "requests": {"c1": level_requests(1), f"c{s.max_concurrent}": level_requests(s.max_concurrent)},
            "temperature": 0.0,
            "weights": f"random normal, std {STD}, {QUANT}",
        },
        "shapes": {},
    }
    for key in keys:
        shape = SHAPES[key]
        model, build = ensure_gguf(key, shape, args.cache_dir, args.llama_bin / "llama-quantize")
        print(f"# {key}: {model} {build}", file=sys.stderr, flush=True)
        entry: dict[str, Any] = {"shape": hparams(shape), "gguf": build, "kv": {}}
        doc["shapes"][key] = entry
        if args.build_only:
            continue
        for kv in args.cache_types.split(","):
            work = Path(tempfile.mkdtemp(prefix=f"shapes-{key}-"))
            entry["kv"][kv] = measure_shape(model, shape, s, kv, work)
            # each shape as it comes: a long run may stop
            args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    if not args.build_only:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
