"""What a copy of an endpoint takes against its reservation: `llmhost endpoint up` with two copies of
the default model at the default `memory_mb: 1024` (serve's default engine settings) and one of
SmolLM2 135M at a smaller `memory_mb` (and engine limits that fit it); a few rounds of concurrent
streamed requests, then for each copy its RSS (peak of the samples), its memory limit
and mechanism as `endpoint status` shows them, and, under a cgroup, the group's peak usage
(memory.max_usage_in_bytes / memory.peak) and its OOM kills. Prints the JSON it writes to --out.

    python benchmarks/copy_memory.py --out benchmarks/results/copy_memory.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.conftest import SMOLLM2  # noqa: E402
from tests.integration.endpoint_helpers import Endpoint, start_endpoint, stop_endpoint  # noqa: E402

# serve's defaults (8 running sequences of 4096 tokens: 720 MiB of KV) do not fit a small reservation;
# the copy refuses to start naming the parts (memory_fit), so the smaller one runs these
SMOL_ENGINE = "{max_total_tokens: 1024, max_input_tokens: 512, max_concurrent: 4}"
CGROUP = Path("/sys/fs/cgroup")
SHOWN = ("copy", "state", "memory_mb", "max_memory_mb", "memory_limit", "rss_mb", "restarts", "last_reason")
PROMPT = "Write a long story about a lighthouse keeper and the ships she guides through the storm."


def endpoint_yaml(smol_mb: int) -> str:
    return (
        "name: copy-memory\ncomponents:\n"
        "  - {name: gemma, model: default, copies: 2, resources: {num_cpus: 0.5, memory_mb: 1024},"
        " startup_health_check_timeout_s: 300}\n"
        f"  - {{name: smol, model: {SMOLLM2}, copies: 1, resources: {{num_cpus: 0.5, memory_mb: {smol_mb}}},"
        f" engine: {SMOL_ENGINE}, startup_health_check_timeout_s: 300}}\n"
    )


def group_figures(pid: int) -> dict[str, Any]:
    """The peak usage and OOM kills of the memory cgroup `pid` runs in (v1 or v2), when it has one."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    fields = [ln.split(":", 2) for ln in lines]
    v1 = [path.lstrip("/") for _, controllers, path in fields if "memory" in controllers.split(",")]
    if v1:
        group, peak, events = CGROUP / "memory" / v1[0], "memory.max_usage_in_bytes", "memory.oom_control"
    else:
        group, peak, events = CGROUP / fields[-1][2].lstrip("/"), "memory.peak", "memory.events"
    out: dict[str, Any] = {"group": str(group)}
    try:
        out["peak_mb"] = round(int((group / peak).read_text()) / 2**20, 1)
        text = (group / events).read_text().splitlines()
        kills = [ln.split()[1] for ln in text if ln.startswith("oom_kill ")]
        out["oom_kills"] = int(kills[0]) if kills else None
    except (OSError, ValueError):
        pass
    return out


async def drive(ep: Endpoint, model: str, streams: int, rounds: int, max_tokens: int) -> int:
    async def one(client: httpx.AsyncClient) -> int:
        body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body) as r:
            text = (await r.aread()).decode()
        return int(r.status_code == 200 and text.rstrip().endswith("data: [DONE]"))

    done = 0
    async with httpx.AsyncClient(base_url=ep.url, timeout=600) as client:
        for _ in range(rounds):
            done += sum(await asyncio.gather(*(one(client) for _ in range(streams))))
    return done


def copies(ep: Endpoint) -> list[dict[str, Any]]:
    return [r for c in ep.status()["components"] for r in c["replicas"]]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    peak: dict[str, float] = {}

    async def watch(ep: Endpoint) -> None:
        while True:
            for r in await asyncio.to_thread(copies, ep):
                if r["pid"]:
                    rss = psutil.Process(r["pid"]).memory_info().rss / 2**20
                    peak[r["copy"]] = max(peak.get(r["copy"], 0.0), rss)
            await asyncio.sleep(0.5)

    with tempfile.TemporaryDirectory(prefix="llmhost-copy-memory-") as tmp:
        ep = await asyncio.to_thread(start_endpoint, Path(tmp), endpoint_yaml(args.smol_mb))
        try:
            watcher = asyncio.create_task(watch(ep))
            answered = {}
            for model in ("gemma", "smol"):
                answered[model] = await drive(ep, model, args.streams, args.rounds, args.max_tokens)
            watcher.cancel()
            rows = [
                {k: r[k] for k in SHOWN}
                | {"peak_rss_mb": round(peak.get(r["copy"], 0.0), 1)}
                | (group_figures(int(r["pid"])) if r["pid"] else {})
                for r in copies(ep)
            ]
        finally:
            await asyncio.to_thread(stop_endpoint, ep)
    return {
        "streams": args.streams,
        "rounds": args.rounds,
        "max_tokens": args.max_tokens,
        "answered": answered,
        "copies": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smol-mb", type=int, default=400, help="SmolLM2's memory_mb")
    ap.add_argument("--streams", type=int, default=8, help="concurrent streamed requests per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "copy_memory.json")
    args = ap.parse_args()
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=1)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
