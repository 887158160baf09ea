"""The performance figures of benchmarks/results/*.json: for each result file, how it is reproduced (its
script's docstring), a bar chart of its headline figures (inline SVG, drawn here: no plotting library)
and every figure it holds as a table."""

from __future__ import annotations

import ast
import html
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docsgen.md import table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# per result file: (chart title, unit, [(bar label, dotted path in the JSON)])
CHARTS: dict[str, list[tuple[str, str, list[tuple[str, str]]]]] = {
    "decode_widths": [
        (
            "One decode step, by sequences in it (consecutive stream ids)",
            "ms",
            [
                (f"{n} sequence{'s' if n > 1 else ''}", f"rows.{n - 1}.consecutive_ms")
                for n in (1, 2, 4, 5, 7, 8, 9, 12, 16)
            ],
        ),
        (
            "One decode step with a free stream id among its sequences",
            "ms",
            [(f"{n} sequences", f"rows.{n - 1}.gap_in_middle_ms") for n in (4, 7, 8)],
        ),
    ],
    "endpoint_copies": [
        (
            "Output tokens/s, concurrency 8 (4 for the half-concurrency copy)",
            "tokens/s",
            [
                ("1 copy × 2 threads", "one_copy_x_2_threads.output_tokens_per_s"),
                ("2 copies × 1 thread (router)", "2_copies_x_1_thread.output_tokens_per_s"),
                ("2 copies × 1 thread (direct)", "2_copies_x_1_thread_direct.output_tokens_per_s"),
                ("1 copy × 1 thread, 4 users", "one_copy_x_1_thread_half_concurrency.output_tokens_per_s"),
                ("1 copy × 1 thread, 8 users", "one_copy_x_1_thread_full_concurrency.output_tokens_per_s"),
            ],
        )
    ],
    "ray_vs_router": [
        (
            "Output tokens/s under load",
            "tokens/s",
            [
                ("router, 1 copy × 2 threads", "under_load.router_1_copy_x_2_threads.output_tokens_per_s"),
                ("router, 2 copies × 1 thread", "under_load.router_2_copies_x_1_thread.output_tokens_per_s"),
                ("Ray, 1 copy × 2 threads", "under_load.ray_1_copy_x_2_threads.output_tokens_per_s"),
                ("Ray, 2 copies × 1 thread", "under_load.ray_2_copies_x_1_thread.output_tokens_per_s"),
            ],
        ),
        (
            "TTFT p50, one request at a time",
            "ms",
            [
                ("direct", "latency.direct.ttft_ms_p50"),
                ("router", "latency.router.ttft_ms_p50"),
                ("Ray", "latency.ray.ttft_ms_p50"),
            ],
        ),
    ],
    "batch_jobs": [
        (
            "Interactive TTFT p90, alone and while a batch runs",
            "s",
            [
                ("alone", "llmhost.interactive_slots_1.ttft_alone_p90_s"),
                ("batch, no slot kept", "llmhost.interactive_slots_0.ttft_during_batch_p90_s"),
                ("batch, 1 slot kept", "llmhost.interactive_slots_1.ttft_during_batch_p90_s"),
            ],
        ),
        (
            "48 requests: wall time",
            "s",
            [
                ("sent at concurrency 8", "llmhost.interactive_slots_1.direct_conc_s"),
                ("a batch, no slot kept", "llmhost.interactive_slots_0.batch_alone_s"),
                ("a batch, 1 slot kept", "llmhost.interactive_slots_1.batch_alone_s"),
                ("llama-server, concurrency 8", "llama_server_direct_conc_p50_s"),
            ],
        ),
    ],
    "retrieval": [
        (
            "Rerank: documents/s (64 a request, ~100 words each), concurrency 1",
            "docs/s",
            [
                ("llmhost", "medians.rerank.llmhost.levels.c1.items_per_s"),
                ("llama-server", "medians.rerank.llama-server.levels.c1.items_per_s"),
                ("llama-server -fa off", "medians.rerank.llama-server fa-off.levels.c1.items_per_s"),
            ],
        ),
        (
            "Embeddings: inputs/s (32 a request, ~100 words each), concurrency 1",
            "inputs/s",
            [
                ("llmhost", "medians.embed.llmhost.levels.c1.items_per_s"),
                ("llama-server", "medians.embed.llama-server.levels.c1.items_per_s"),
                ("llama-server -fa off", "medians.embed.llama-server fa-off.levels.c1.items_per_s"),
            ],
        ),
    ],
    "constraint_engines": [
        (
            "Mask time per token, median",
            "ms",
            [
                ("llguidance", "llguidance.mask_ms_median"),
                ("xgrammar", "xgrammar.mask_ms_median"),
                ("llama.cpp grammar", "llama.cpp grammar.mask_ms_median"),
            ],
        )
    ],
    "http_client_rate": [
        (
            "Streamed requests/s of the HTTP client",
            "req/s",
            [
                ("llmhost (aiohttp)", "results.0.requests_per_s"),
                ("aiohttp", "results.1.requests_per_s"),
                ("httpx", "results.2.requests_per_s"),
            ],
        )
    ],
    "s3_cold_start": [
        (
            "Start to /ping 200, median",
            "s",
            [
                ("llmhost serve s3://, first start", "median.llmhost_s3_first_start_s"),
                ("llmhost serve s3://, cached", "median.llmhost_s3_cached_start_s"),
                ("boto3 download + local serve", "median.boto3_download_then_local_serve_s"),
            ],
        )
    ],
    "structured_output": [
        (
            "Output tokens/s, concurrency 8",
            "tokens/s",
            [
                ("llmhost constrained", "structured.concurrency_8.llmhost_constrained.output_tokens_per_s"),
                (
                    "llmhost unconstrained",
                    "structured.concurrency_8.llmhost_unconstrained_same_tokens.output_tokens_per_s",
                ),
                (
                    "llama-server json_schema",
                    "structured.concurrency_8.llama_server_json_schema.output_tokens_per_s",
                ),
            ],
        )
    ],
    "throughput_bound": [
        (
            "Output tokens/s at concurrency 8: cheapest schedule, each server",
            "tokens/s",
            [
                (f"{w}, {who}", f"workloads.{w}.{key}")
                for w in ("distinct", "shared_prefix")
                for who, key in (
                    ("bound", "bound_output_tokens_per_s"),
                    ("llmhost", "llmhost_output_tokens_per_s"),
                    ("llama-server", "llama-server_output_tokens_per_s"),
                )
            ],
        )
    ],
    "tune_vs_llama_server": [
        (
            "Goodput meeting the SLO",
            "req/s",
            [
                ("llmhost tune's answer", "tune.answer.chosen.goodput_rps"),
                ("llama-server defaults", "llama_server_defaults.best_goodput.goodput_rps"),
            ],
        )
    ],
}


def lookup(doc: Any, dotted: str) -> Any:
    """A value by dotted path; keys may hold dots themselves ("llama.cpp grammar"), tried longest first."""
    if dotted == "":
        return doc
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if isinstance(doc, dict) and key in doc:
            return lookup(doc[key], ".".join(parts[n:]))
        if isinstance(doc, list) and key.isdigit() and int(key) < len(doc):
            return lookup(doc[int(key)], ".".join(parts[n:]))
    raise KeyError(f"{dotted} is not in the results")


def bar_chart(title: str, unit: str, bars: list[tuple[str, float]]) -> str:
    """Horizontal bars as one line of inline SVG."""
    width, label_w, bar_h, gap = 640, 230, 22, 8
    top = 28
    height = top + len(bars) * (bar_h + gap) + 4
    most = max((v for _, v in bars), default=1.0) or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{html.escape(title)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" '
        f'font-size="12">',
        f'<text x="0" y="16" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, (label, value) in enumerate(bars):
        y = top + i * (bar_h + gap)
        w = max(1.0, (width - label_w - 90) * value / most)
        parts += [
            f'<text x="0" y="{y + 15}">{html.escape(label)}</text>',
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="#3f51b5"/>',
            f'<text x="{label_w + w + 6:.1f}" y="{y + 15}">{value:,.4g} {html.escape(unit)}</text>',
        ]
    return "".join([*parts, "</svg>"])


def flatten(doc: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, value) of every figure; a list of records is summarised by its length."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(doc, list):
        if all(not isinstance(v, (dict, list)) for v in doc):
            yield prefix, ", ".join(_fmt(v) for v in doc) or "(none)"
        else:
            yield prefix, f"{len(doc)} records (see the file)"
    else:
        yield prefix, _fmt(doc)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def docstring(name: str) -> str:
    script = ROOT / "benchmarks" / f"{name}.py"
    if not script.exists():
        return ""
    return ast.get_docstring(ast.parse(script.read_text())) or ""


def section(path: Path) -> str:
    name = path.stem
    doc = json.loads(path.read_text())
    out = [f"### `{name}`", ""]
    script = f"benchmarks/{name}.py"
    if (ROOT / script).exists():
        out += [
            f"Reproduce: `.venv/bin/python {script}` (its options: `--help`); it prints the JSON "
            f"that is kept in `benchmarks/results/{name}.json`. What it measures, from its docstring:",
            "",
            "```text",
            docstring(name),
            "```",
            "",
        ]
    for title, unit, bars in CHARTS.get(name, []):
        values = [(label, float(lookup(doc, p))) for label, p in bars]
        out += [bar_chart(title, unit, values), ""]
    out += [table(["figure", "value"], [[f"`{k}`", v] for k, v in flatten(doc)]), ""]
    return "\n".join(out)


def render() -> str:
    return "\n".join(section(p) for p in sorted(RESULTS.glob("*.json")))
