"""Time and peak memory of `llmhost optimize merge-lora` on the default model (Gemma 3 270M Q4_K_M).

Writes a random rank-`--rank` adapter over every attention and feed-forward weight of every block
(attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down), then runs the merge command in a
child process and reports its wall time and peak RSS (getrusage of the child), beside the peak RSS
of a child that only imports the CLI and exits (the floor of any command). Prints JSON.

    .venv/bin/python benchmarks/lora_merge.py --rank 16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

from llmhost.engine.llamacpp.gguf_check import check_file
from llmhost.store import resolve_model

ADAPTED = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def write_adapter(out: Path, base: Path, rank: int) -> int:
    """A random adapter over ADAPTED of every block; returns how many weights it adapts."""
    layout = check_file(base)
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(out), str(layout.metadata["general.architecture"]))
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))
    names = [n for n in layout.tensors if n.startswith("blk.") and n.split(".")[2] in ADAPTED]
    for name in names:
        n_in, n_out = layout.tensors[name][0][:2]
        writer.add_tensor(f"{name}.lora_a", rng.normal(0, 0.01, (rank, n_in)).astype(np.float32))
        writer.add_tensor(f"{name}.lora_b", rng.normal(0, 0.01, (n_out, rank)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return len(names)


def child(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one child process (run one at a time: ru_maxrss is the
    largest of the children waited for so far)."""
    t0 = time.perf_counter()
    pid = subprocess.Popen(argv).pid
    _, status, usage = os.wait4(pid, 0)
    if status != 0:
        raise SystemExit(f"{argv} failed ({status})")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    base = resolve_model()
    with tempfile.TemporaryDirectory() as tmp:
        adapter, out = Path(tmp) / "adapter.gguf", Path(tmp) / "merged.gguf"
        n_weights = write_adapter(adapter, base, args.rank)
        floor_s, floor_mib = child([sys.executable, "-c", "import llmhost.cli"])
        cli = [sys.executable, "-m", "llmhost.cli", "optimize", "merge-lora", str(base)]
        seconds, peak_mib = child([*cli, "--lora", str(adapter), "--out", str(out)])
        report = {
            "base": base.name,
            "base_mib": round(base.stat().st_size / 2**20, 1),
            "adapter_mib": round(adapter.stat().st_size / 2**20, 1),
            "rank": args.rank,
            "weights_adapted": n_weights,
            "merged_mib": round(out.stat().st_size / 2**20, 1),
            "merge_wall_s": round(seconds, 2),
            "merge_peak_rss_mib": round(peak_mib, 1),
            "import_only_wall_s": round(floor_s, 2),
            "import_only_peak_rss_mib": round(floor_mib, 1),
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "self_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
