"""llama.cpp's own speed at two versions, on the shapes of benchmarks/shapes.py: what part of a gap
between llmhost and llama-server is the llama.cpp each one is built on.

llmhost runs the llama.cpp that llama-cpp-python vendors (its sdist's `vendor/llama.cpp`); the peer in
benchmarks/ is built from another release. Their `llama-bench` runs here alternately on the same file,
threads and flags (flash attention on, as both servers run), `--rounds` times: prompt processing of 64
and 512 tokens (one user's prompt; eight users' prompts at once) and the generation of 64 tokens. Per
shape and test: each build's median tokens/s and the median of the per-round ratios with its range.

    # llama-bench from llama-cpp-python's vendored source (the Makefile's flags; `ninja llama-bench`)
    .venv/bin/python benchmarks/ggml_versions.py --old VENDOR/build/bin/llama-bench \\
        --new /work/peer/src/llama.cpp/build/bin/llama-bench
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

TESTS = ("-p", "64,512", "-n", "64")


def bench(binary: Path, model: Path, threads: int, reps: int) -> list[dict[str, Any]]:
    """One llama-bench run: tokens/s of each test."""
    cmd = [
        str(binary),
        "-m",
        str(model),
        "-t",
        str(threads),
        "-fa",
        "1",
        *TESTS,
        "-r",
        str(reps),
        "-o",
        "json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [
        {
            "test": f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}",
            "tokens_per_s": r["avg_ts"],
            "stddev": r["stddev_ts"],
            "commit": r.get("build_commit"),
        }
        for r in json.loads(out)
    ]


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per shape and test: each build's median tokens/s, old / new per round (median, range)."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted({(r["shape"], r["test"]) for r in rows}):
        mine = [r for r in rows if (r["shape"], r["test"]) == key]
        by = {(r["round"], r["build"]): r["tokens_per_s"] for r in mine}
        rounds = sorted({r["round"] for r in mine if (r["round"], "old") in by and (r["round"], "new") in by})
        ratios = [by[(k, "old")] / by[(k, "new")] for k in rounds]
        out[f"{key[0]} {key[1]}"] = {
            "old_tokens_per_s": round(statistics.median(by[(k, "old")] for k in rounds), 2),
            "new_tokens_per_s": round(statistics.median(by[(k, "new")] for k in rounds), 2),
            "old/new": {
                "median": round(statistics.median(ratios), 3),
                "min": round(min(ratios), 3),
                "max": round(max(ratios), 3),
            },
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, required=True, help="llama-bench of llmhost's llama.cpp")
    ap.add_argument("--new", type=Path, required=True, help="llama-bench of the peer's llama.cpp")
    ap.add_argument("--shapes", default="qwen2.5-0.5b,llama3.2-1b,llama3.2-3b")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "llmhost-shapes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3, help="llama-bench's -r")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ggml_versions.json")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for shape in args.shapes.split(","):
        # the file benchmarks/shapes.py built (`--build-only` fills the cache)
        [model] = sorted(args.cache_dir.glob(f"{shape}-*.Q4_K_M.gguf"))
        for round_ in range(1, args.rounds + 1):
            for build, binary in (("old", args.old), ("new", args.new)):
                for r in bench(binary, model, args.threads, args.reps):
                    rows.append({"shape": shape, "round": round_, "build": build, **r})
    doc = {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform()},
        "settings": {
            "threads": args.threads,
            "flash_attn": True,
            "tests": " ".join(TESTS),
            "reps": args.reps,
        },
        "summary": summarize(rows),
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=2))


if __name__ == "__main__":
    main()
