"""What a tuning run leaves in its directory: ``tune.json`` (every candidate and the answer),
``endpoint.yaml`` (the chosen deployment) and ``report.html``. Written after every candidate, so a
run stopped by its budget or Ctrl-C keeps what it measured."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import yaml

from llmhost.bench.process import ENDPOINT_COPY_MEMORY_MB
from llmhost.endpoint.spec import parse_endpoint
from llmhost.engine.kv.memory_fit import RUNTIME_MARGIN_MB
from llmhost.shared.jsontypes import JSONObject
from llmhost.tune.adapters import SERVED_NAME, Adapters
from llmhost.tune.doc import Answer, PickJSON, TuneDoc
from llmhost.tune.runner import TuneSettings
from llmhost.tune.state import CandidateRecord, Pick, best_goodput, cheapest

TUNE_JSON = "tune.json"
ENDPOINT_YAML = "endpoint.yaml"
TUNE_REPORT = "report.html"
FORMAT = "llmhost-tune/1"


def copy_memory_mb(rec: CandidateRecord) -> int:
    """Memory to reserve per copy: the largest resident size its copies reached while measured, plus
    a quarter for longer contexts than the workload's (at least the runtime margin a copy's own memory
    fit keeps at start: a small model's quarter is less, and its copy then refused to start), in 64 MB
    steps; the sweep's own figure when nothing was measured."""
    p = rec.processes
    server = p["server"] if p is not None else None
    copies = (p["children"] if p is not None else []) or ([server] if server is not None else [])
    rss = max((c["rss_mb"] for c in copies), default=None)
    if rss is None:
        return ENDPOINT_COPY_MEMORY_MB
    return int(math.ceil(max(rss * 1.25, rss + RUNTIME_MARGIN_MB) / 64.0) * 64)


def endpoint_doc(
    rec: CandidateRecord,
    model: str,
    host_cpus: int,
    price_per_hour: float,
    router_cpus: int = 0,
    adapters: Adapters | None = None,
) -> JSONObject:
    """The endpoint file deploying ``rec``'s candidate as it was measured (its LoRA adapters under its
    component), checked by the endpoint's own parser."""
    cand = rec.candidate
    engine: JSONObject = {
        k: v
        for k, v in (("max_concurrent", cand.max_concurrent), ("max_batch_tokens", cand.max_batch_tokens))
        if v is not None
    }
    if cand.speculative:
        engine["speculative"] = "ngram"
    doc: JSONObject = {  # an endpoint file, which parse_endpoint checks below
        "name": "tuned",
        "instance": {"type": "local", "price_per_hour": price_per_hour},
        "components": [
            {
                "name": SERVED_NAME,
                "model": str(Path(model).resolve()) if Path(model).exists() else model,  # cwd-proof
                "copies": cand.copies,
                "resources": {"num_cpus": cand.threads or host_cpus, "memory_mb": copy_memory_mb(rec)},
                "engine": engine,
                **({"adapters": [*adapters.endpoint_entries()]} if adapters and adapters.entries else {}),
            }
        ],
    }
    if cand.copies > 1 and router_cpus:
        doc["router"] = {"num_cpus": router_cpus}
    parse_endpoint(doc, f"endpoint file for {cand.name}")
    return doc


def _ratio(new: float | None, old: float | None) -> float | None:
    return new / old if new is not None and old else None


def answer(records: list[CandidateRecord]) -> Answer:
    """The chosen deployment, the cheapest, the baseline's own, and their ratios to the baseline."""
    base = [r for r in records if r.candidate.baseline]
    best, cheap = best_goodput(records), cheapest(records)
    b_best, b_cheap = best_goodput(base), cheapest(base)

    def js(p: Pick | None) -> PickJSON | None:
        return p.to_json() if p else None

    return {
        "chosen": js(best),
        "cheapest": js(cheap),
        "baseline": {"best_goodput": js(b_best), "cheapest": js(b_cheap)},
        "goodput_vs_baseline": _ratio(
            best.goodput_rps if best else None, b_best.goodput_rps if b_best else None
        ),
        # below 1: cheaper than the baseline
        "cost_vs_baseline": _ratio(
            cheap.cost_per_1m_tokens_usd if cheap else None,
            b_cheap.cost_per_1m_tokens_usd if b_cheap else None,
        ),
    }


def tune_doc(settings: TuneSettings, records: list[CandidateRecord], started_at: str) -> TuneDoc:
    s = settings
    return {
        "format": FORMAT,
        "started_at": started_at,
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "slo": {
            "ttft_ms": s.slo.ttft_ms,
            "itl_ms": s.slo.itl_ms,
            "percentile": s.slo.percentile,
            "itl_means": "tpot",
            "describe": s.slo.describe(),
        },
        "host": {"cpus": s.space.host_cpus, "router_cpus": s.space.router_cpus},
        "price_per_hour": s.price_per_hour,
        "max_minutes": s.max_minutes,
        "models": {str(k): v for k, v in s.models.items()},
        "workload": asdict(s.workload),
        "adapters": s.adapters.endpoint_entries(),
        "space": {k: list(v) for k, v in s.space.axes().items()},
        "answer": answer(records),
        "candidates": [r.to_json() for r in records],
    }


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # a reader never sees half a file, even if we are killed mid-write


def write_outputs(settings: TuneSettings, records: list[CandidateRecord], started_at: str) -> TuneDoc:
    """Write tune.json, endpoint.yaml (when a candidate met the SLO) and report.html."""
    from llmhost.tune.report import render_report  # matplotlib loads only when writing

    out = settings.out_dir
    out.mkdir(parents=True, exist_ok=True)
    doc = tune_doc(settings, records, started_at)
    chosen = doc["answer"]["chosen"]
    if chosen is not None:
        rec = next(r for r in records if r.candidate.name == chosen["name"])
        sp, model = settings.space, settings.models[rec.candidate.quant]
        ep = endpoint_doc(
            rec, model, sp.host_cpus, settings.price_per_hour, sp.router_cpus, settings.adapters
        )
        _atomic_write(out / ENDPOINT_YAML, yaml.safe_dump(ep, sort_keys=False))
        doc["endpoint_file"] = str(out / ENDPOINT_YAML)
    else:
        (out / ENDPOINT_YAML).unlink(missing_ok=True)  # an earlier run's answer is not this one's
    _atomic_write(out / TUNE_JSON, json.dumps(doc, indent=2) + "\n")
    _atomic_write(out / TUNE_REPORT, render_report(doc))
    return doc
