"""Retrieval against llama.cpp's llama-server, in one run: embeddings inputs/s and rerank documents/s,
at real model shapes with random weights (benchmarks/bert_gguf.py: an embedder at bge-small-en-v1.5's
shape, CLS pooling; a cross-encoder at ms-marco-MiniLM-L-6-v2's, rank pooling with a one-label head;
F16 matrices, SmolLM2's 49k BPE vocabulary).

Each server runs alone, with the same threads, one after the other; with --rounds N every server runs
N times, interleaved, and each ratio is the median over the rounds with its range. The load is
`llmhost bench run --workload embed|rerank` over HTTP: embed sends --inputs texts a request, rerank a
12-word query and --documents documents, every text --words words cut from the built-in prompts (about
1.3 SmolLM2 tokens a word), closed loop at each --levels concurrency, one warm-up request per level.
Both run with their defaults (flash attention on, on CPU); the peer also as `llama-server fa-off`, with
`-fa off` (what llmhost's `--no-flash-attn` runs: a vector then does not depend on its batch).

Also recorded: each server's peak RSS (VmHWM, with its children's), and agreement: the first request's
rerank scores and embeddings from llmhost against each peer's (max |score difference|, min cosine),
whole and with each document (input) in a request of its own, the peer's answer free of its batching.

    .venv/bin/python benchmarks/retrieval.py --rounds 3 --out benchmarks/results/retrieval.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from bert_gguf import BGE_SMALL, MINILM_RERANKER, BertShape, build_bert_gguf
from serve_compare import Running

from llmhost.bench.config import BenchConfig
from llmhost.bench.load.retrieval import RetrievalSettings, RetrievalTarget, retrieval_requests
from llmhost.bench.runner import run_benchmark

LLAMA_SERVER = "/work/peer/src/llama.cpp/build/bin/llama-server"
SERVERS = ("llmhost", "llama-server", "llama-server fa-off")
WORKLOADS: dict[str, BertShape] = {"embed": BGE_SMALL, "rerank": MINILM_RERANKER}
GOALS = {"embed": 1.0, "rerank": 1.0}  # llmhost / llama-server items/s, the targets


def server_cmd(name: str, workload: str, model: Path, threads: int, extra: list[str]) -> list[str]:
    """The command line of `name` ("{port}": Running's port)."""
    if name == "llmhost":
        # --embeddings: the model's own pooling (rank for the cross-encoder: its scores)
        return [
            sys.executable,
            "-m",
            "llmhost.cli",
            "serve",
            str(model),
            "--embeddings",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--threads",
            str(threads),
            "--log-level",
            "warning",
            *extra,
        ]
    cmd = [LLAMA_SERVER, "-m", str(model), "--host", "127.0.0.1", "--port", "{port}", "-t", str(threads)]
    cmd += ["--rerank"] if workload == "rerank" else ["--embeddings"]
    if name.endswith("fa-off"):
        cmd += ["-fa", "off"]
    return [*cmd, "--no-webui"]


def peak_rss_mb(pid: int) -> float:
    """VmHWM of a server and its children (llmhost serve runs in one process; the sum is safe)."""
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    total_kb = 0
    for one in pids:
        for line in Path(f"/proc/{one}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total_kb += int(line.split()[1])
    return round(total_kb * 1024 / 1e6, 1)


def level_requests(conc: int) -> int:
    return max(4, 2 * conc)


def measure(url: str, workload: str, conc: int, per_request: int, words: int) -> dict[str, Any]:
    cfg = BenchConfig(
        url=url,
        workload=workload,
        documents=per_request,
        document_words=words,
        concurrency=[conc],
        requests=level_requests(conc),
        warmup=1,
        timeout_s=600,
        name=f"{workload}-c{conc}",
        server_metrics=False,
    )
    level = run_benchmark(cfg).levels()[0]
    return {
        "concurrency": conc,
        "requests": level.requests,
        "success_pct": level.success_pct,
        "errors": level.errors,
        "items_per_s": round(level.items_per_s, 2),
        "input_tokens_per_s": round(level.input_tokens_per_s, 1),
        "e2e_ms_p50": _ms(level.get("e2e_s_p50")),
        "e2e_ms_p90": _ms(level.get("e2e_s_p90")),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def _answered(url: str, workload: str, texts: list[str], query: str | None) -> list[Any]:
    """Scores by document, or vectors by input."""
    body = RetrievalTarget(workload).body(texts, query)
    answer = httpx.post(f"{url}{RetrievalTarget(workload).path}", json=body, timeout=600).json()
    if workload == "rerank":
        scores = sorted(answer["results"], key=lambda r: r["index"])
        return [float(r["relevance_score"]) for r in scores]
    return [d["embedding"] for d in sorted(answer["data"], key=lambda d: d["index"])]


def check_answer(url: str, workload: str, per_request: int, words: int) -> tuple[list[Any], list[Any]]:
    """The first request of the workload answered whole, and each of its documents (inputs) in a
    request of its own: a server that batches them differently gives other numbers batched."""
    [req] = retrieval_requests(RetrievalSettings(workload, per_request, words, 1))
    whole = _answered(url, workload, req.texts, req.query)
    alone = [_answered(url, workload, [text], req.query)[0] for text in req.texts]
    return whole, alone


def agreement(workload: str, ours: list[Any], theirs: list[Any]) -> dict[str, float]:
    if workload == "rerank":
        diff = np.abs(np.asarray(ours) - np.asarray(theirs))
        return {"max_abs_score_diff": float(diff.max()), "score_spread": float(np.ptp(theirs))}
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return {"min_cosine": float(cos.min())}


def run_server(
    name: str, workload: str, model: Path, args: argparse.Namespace, check: bool
) -> dict[str, Any]:
    per_request = args.inputs if workload == "embed" else args.documents
    extra = args.llmhost_args.split() if args.llmhost_args else []
    server = Running(name, server_cmd(name, workload, model, args.threads, extra), "/health")
    try:
        server.wait_ready()
        levels = [measure(server.url, workload, c, per_request, args.words) for c in args.levels]
        out: dict[str, Any] = {"levels": levels, "peak_rss_mb": peak_rss_mb(server.proc.pid)}
        if check:
            out["answer"], out["alone"] = check_answer(server.url, workload, per_request, args.words)
        return out
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inputs", type=int, default=32, help="Embed: inputs per request.")
    ap.add_argument("--documents", type=int, default=64, help="Rerank: documents per request.")
    ap.add_argument("--words", type=int, default=100, help="Words of each input or document.")
    ap.add_argument("--workloads", default="embed,rerank")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--llmhost-args", default="", help="More `llmhost serve` options.")
    ap.add_argument("--out", type=Path, default=None, help="Also write the JSON here.")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="retrieval-"))
    servers = args.servers.split(",")
    rounds: list[dict[str, Any]] = []
    answers: dict[str, dict[str, Any]] = {}
    load = {"before": os.getloadavg()}
    for r in range(args.rounds):
        results: dict[str, Any] = {}
        for workload in args.workloads.split(","):
            model = work / f"{workload}.gguf"
            if not model.exists():
                build_bert_gguf(model, WORKLOADS[workload])
            results[workload] = {}
            for name in servers:
                got = run_server(name, workload, model, args, check=r == 0)
                if "answer" in got:
                    answers.setdefault(workload, {})[name] = got.pop("answer")
                    answers[workload][f"{name}, one a request"] = got.pop("alone")
                results[workload][name] = got
                print(f"# round {r + 1}: {workload} {name} done", file=sys.stderr, flush=True)
        rounds.append(results)
    load["after"] = os.getloadavg()
    doc = report(rounds, answers, args, load)
    print(json.dumps(doc, indent=2))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def ratios(rounds: list[dict[str, Any]], peer: str) -> dict[str, Any]:
    """llmhost / peer items/s by workload and level: the median over the rounds, and its range."""
    out: dict[str, Any] = {}
    for workload, by_server in rounds[0].items():
        if "llmhost" not in by_server or peer not in by_server:
            continue
        for i, lv in enumerate(by_server["llmhost"]["levels"]):
            values = [
                _ratio(
                    r[workload]["llmhost"]["levels"][i]["items_per_s"],
                    r[workload][peer]["levels"][i]["items_per_s"],
                )
                for r in rounds
            ]
            got = [v for v in values if v is not None]
            out[f"{workload}_c{lv['concurrency']}"] = {
                "median": round(statistics.median(got), 3) if got else None,
                "min": min(got, default=None),
                "max": max(got, default=None),
            }
    return out


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each server's items/s, p50 latency and peak RSS: medians over the rounds."""
    out: dict[str, Any] = {}
    for workload, by_server in rounds[0].items():
        out[workload] = {}
        for name, first in by_server.items():
            levels = {}
            for i, lv in enumerate(first["levels"]):
                runs = [r[workload][name]["levels"][i] for r in rounds]
                levels[f"c{lv['concurrency']}"] = {
                    key: statistics.median(x[key] for x in runs if x[key] is not None)
                    for key in ("items_per_s", "input_tokens_per_s", "e2e_ms_p50", "e2e_ms_p90")
                }
            rss = statistics.median(r[workload][name]["peak_rss_mb"] for r in rounds)
            out[workload][name] = {"levels": levels, "peak_rss_mb": rss}
    return out


def report(
    rounds: list[dict[str, Any]],
    answers: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    load: dict[str, Any],
) -> dict[str, Any]:
    checks: dict[str, Any] = {}
    for workload, by_server in answers.items():
        ours = by_server.get("llmhost")
        if ours is None:
            continue
        checks[workload] = {
            f"vs {peer}": agreement(workload, ours, theirs)
            for peer, theirs in by_server.items()
            if peer != "llmhost"
        }
    by_peer = {f"llmhost/{peer}": ratios(rounds, peer) for peer in SERVERS[1:]}
    main_ratios = by_peer["llmhost/llama-server"]
    return {
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "platform": platform.platform(),
            "processor": _cpu_model(),
            "loadavg": load,
        },
        "settings": {
            "threads": args.threads,
            "levels": args.levels,
            "rounds": args.rounds,
            "requests_per_level": {f"c{c}": level_requests(c) for c in args.levels},
            "warmup_per_level": 1,
            "embed": {"model": _shape(BGE_SMALL), "inputs_per_request": args.inputs, "words": args.words},
            "rerank": {
                "model": _shape(MINILM_RERANKER),
                "documents_per_request": args.documents,
                "words": args.words,
            },
            "weights": "random, F16 matrices; SmolLM2's 49,152-token BPE vocabulary (BERT's is 30,522)",
            "llama_server": LLAMA_SERVER,
            "llama_server_flags": "defaults (flash attention auto); 'fa-off': -fa off",
            "llmhost_args": args.llmhost_args,
        },
        "goal": {k: f"llmhost >= {v}x llama-server's items/s, same threads" for k, v in GOALS.items()},
        "items_per_s_ratios": by_peer,
        "met": {
            key: value["median"] is not None and value["median"] >= GOALS[key.split("_")[0]]
            for key, value in main_ratios.items()
        },
        "agreement": checks,
        "medians": medians(rounds),
        "rounds": rounds,
    }


def _shape(s: BertShape) -> dict[str, Any]:
    return {
        "shape_of": s.name,
        "layers": s.n_layer,
        "hidden": s.n_embd,
        "heads": s.n_head,
        "ff": s.n_ff,
        "positions": s.n_ctx,
        "pooling": s.pooling.name.lower(),
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
