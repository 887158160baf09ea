"""The results directory: raw ``requests.jsonl`` (written as requests complete), ``summary.json``,
``summary.csv`` and ``report.html`` (the Jinja2 template ``templates/report.html.jinja`` with the
matplotlib charts of :mod:`llmhost.bench.figures.charts` inlined as SVG, so it opens offline).
"""

from __future__ import annotations

import csv
import functools
import io
import json
from pathlib import Path
from typing import IO

import jinja2
from markupsafe import Markup

from llmhost.bench.figures.metrics import (
    ANSWER_TTFT_S,
    DISTRIBUTIONS,
    ENCODE_MS,
    ERROR_KINDS,
    STATS,
    LevelSummary,
    RequestRecord,
)
from llmhost.bench.load.server_metrics import SHOWN
from llmhost.bench.results import (
    REPORT_HTML,
    REQUESTS_JSONL,
    SUMMARY_CSV,
    SUMMARY_JSON,
    BenchResults,
    ConfigResult,
    Recommendation,
)

CSV_COLUMNS = [
    "config",
    "level",
    "mode",
    "concurrency",
    "rate_rps",
    "requests",
    "successes",
    "success_pct",
    "wall_s",
    "requests_per_s",
    "good_requests",
    "goodput_rps",
    "output_tokens_per_s",
    "input_tokens_per_s",
    "output_tokens",
    "input_tokens",
    "mean_in_flight",
    "reasoning_tokens",
    "items",
    "items_per_s",
    "images",
    *[f"{name}_{stat}" for name in DISTRIBUTIONS for stat in STATS],
    *[f"{ANSWER_TTFT_S}_{stat}" for stat in STATS],
    *[f"{ENCODE_MS}_{stat}" for stat in STATS],
    "price_per_hour",
    "minutes_per_1m_tokens",
    "cost_per_1m_tokens_usd",
    "total_tokens_per_s_blended",
    "blended_price_per_1m_tokens_usd",
    "discount",
    "stopped",
    *[key for key, _, _ in SHOWN],
    *[f"errors_{k}" for k in ERROR_KINDS],
]
CONFIG_HEADERS = ["name", "url", "api", "parameters", "$/h", "workload", "error", "load stopped / saturated"]


class ResultsWriter:
    """Writes each request to ``requests.jsonl`` as it completes; :meth:`finalize` writes the rest."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = open(self.out_dir / REQUESTS_JSONL, "w", encoding="utf-8")  # noqa: SIM115

    def record(self, rec: RequestRecord) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(rec.to_json(), separators=(",", ":")) + "\n")

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def finalize(self, results: BenchResults) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        results.out_dir = str(self.out_dir)
        write_summary(results, self.out_dir)


def write_summary(results: BenchResults, out_dir: str | Path) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_JSON).write_text(json.dumps(results.to_json(), indent=2) + "\n", encoding="utf-8")
    (out / SUMMARY_CSV).write_text(summary_csv(results), encoding="utf-8")
    (out / REPORT_HTML).write_text(render_html(results), encoding="utf-8")


def fmt(v: float | None, digits: int = 3) -> str:
    """A figure for a table cell or a chart label: 3 significant digits, thousands grouped."""
    if v is None:
        return "–"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def summary_csv(results: BenchResults) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for lv in results.levels():
        writer.writerow({k: ("" if v is None else v) for k, v in lv.flat().items()})
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- report

REC_HEADERS = [
    "goal",
    "configuration",
    "level",
    "output tok/s",
    "p50 ms/token",
    "p50 TTFT ms",
    "$/h",
    "$ per 1M",
    "why",
]
LEVEL_HEADERS = [
    "configuration",
    "level",
    "requests",
    "success %",
    "req/s",
    "goodput req/s",
    "output tok/s",
    "TTFT p50 s",
    "TTFT p99 s",
    "TPOT p50 s",
    "ITL p50 s",
    "ITL p99 s",
    "ms/token p50",
    "E2E p50 s",
    "min per 1M",
    "$ per 1M",
    "blended $ per 1M",
    "errors",
]


@functools.cache
def template_env(package: str = "llmhost.bench") -> jinja2.Environment:
    """The Jinja environment of a package's HTML reports (`templates/` beside its modules)."""
    # autoescape: configuration names, URLs, errors and notes come from the user or the target
    return jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(results: BenchResults) -> str:
    """``report.html``: one self-contained page (inline SVG charts, no external resources)."""
    server_headers, server_rows = server_table(results)
    conversation_headers, conversation_rows = conversation_table(results)
    cost_rec = next((r for r in results.recommendations if r.goal == "most_cost_effective"), None)
    return (
        template_env()
        .get_template("report.html.jinja")
        .render(
            results=results,
            charts=report_charts(results),
            cost_note=cost_rec.note if cost_rec else "",
            rec_headers=REC_HEADERS,
            rec_rows=[_rec_row(r) for r in results.recommendations],
            level_headers=LEVEL_HEADERS,
            level_rows=[_level_row(lv) for lv in results.levels()],
            server_headers=server_headers,
            server_rows=server_rows,
            conversation_headers=conversation_headers,
            conversation_rows=conversation_rows,
            config_headers=CONFIG_HEADERS,
            config_rows=[_config_row(c) for c in results.configs],
            settings=json.dumps(results.settings, sort_keys=True),
        )
    )


def report_charts(results: BenchResults) -> list[Markup]:
    """Throughput and three latencies against load, and cost per configuration when priced."""
    # imported here: matplotlib takes a while to import, and the load generator imports this module
    from llmhost.bench.figures.charts import bar_chart, line_chart

    closed = any(lv.mode == "closed" for lv in results.levels())
    x_label = "concurrency" if closed else "request rate (req/s)"
    lines = [
        ("throughput", "Output throughput", "output_tokens_per_s", 1.0, "output tokens/s"),
        ("ms-per-token", "Latency: p50 ms per token", "ms_per_token_p50", 1.0, "ms/token"),
        ("ttft", "Latency: p50 TTFT", "ttft_s_p50", 1000.0, "TTFT (ms)"),
        ("itl", "Latency: p50 inter-token", "itl_s_p50", 1000.0, "ITL (ms)"),
    ]
    charts = [
        line_chart(cid, title, _series(results, key, scale), x_label, y_label)
        for cid, title, key, scale, y_label in lines
    ]
    bars = _cost_bars(results)
    if bars:
        labels = [fmt(v) for _, v in bars]
        charts.append(bar_chart("cost", "Cost per 1M output tokens", bars, "USD per 1M tokens", labels))
    return charts


def _series(
    results: BenchResults, key: str, scale: float = 1.0
) -> list[tuple[str, list[tuple[float, float]]]]:
    out = []
    for c in results.configs:
        pts = [(lv.load, v * scale) for lv in c.levels if (v := lv.get(key)) is not None]
        if pts:
            out.append((c.name, pts))
    return out


def _cost_bars(results: BenchResults) -> list[tuple[str, float]]:
    """Each configuration's cost per 1M tokens at the most cost-effective level, else its cheapest."""
    cost_rec = next((r for r in results.recommendations if r.goal == "most_cost_effective"), None)
    load = None
    if cost_rec and cost_rec.figures:
        load = cost_rec.figures.get("concurrency") or cost_rec.figures.get("rate_rps")
    bars: list[tuple[str, float]] = []
    for c in results.configs:
        priced = [lv for lv in c.levels if lv.cost_per_1m_tokens_usd is not None]
        if not priced:
            continue
        at = next((lv for lv in priced if load is not None and lv.load == load), None)
        lv = at or min(priced, key=lambda x: x.cost_per_1m_tokens_usd or 0.0)
        bars.append((c.name, float(lv.cost_per_1m_tokens_usd or 0.0)))
    return bars


def _rec_row(r: Recommendation) -> list[str]:
    f = r.figures
    ttft = f.get("ttft_s_p50")
    return [
        r.title,
        r.config or "–",
        r.level or "–",
        fmt(f.get("output_tokens_per_s")),
        fmt(f.get("ms_per_token_p50")),
        fmt(ttft * 1000.0 if ttft is not None else None),
        fmt(f.get("price_per_hour")),
        fmt(f.get("cost_per_1m_tokens_usd")),
        r.note,
    ]


def _level_row(lv: LevelSummary) -> list[str]:
    errs = ", ".join(f"{k}: {v}" for k, v in sorted(lv.errors.items())) or "–"
    return [
        lv.config,
        lv.level,
        str(lv.requests),
        f"{lv.success_pct:.1f}",
        fmt(lv.requests_per_s),
        fmt(lv.goodput_rps),
        fmt(lv.output_tokens_per_s),
        fmt(lv.get("ttft_s_p50"), 4),
        fmt(lv.get("ttft_s_p99"), 4),
        fmt(lv.get("tpot_s_p50"), 4),
        fmt(lv.get("itl_s_p50"), 4),
        fmt(lv.get("itl_s_p99"), 4),
        fmt(lv.get("ms_per_token_p50")),
        fmt(lv.get("e2e_s_p50"), 4),
        fmt(lv.minutes_per_1m_tokens),
        fmt(lv.cost_per_1m_tokens_usd),
        fmt(lv.blended_price_per_1m_tokens_usd),
        errs + (f" (stopped: {lv.stopped})" if lv.stopped else ""),
    ]


def _config_row(c: ConfigResult) -> list[str]:
    params = ", ".join(f"{k}={v}" for k, v in c.params.items())
    wl = c.workload
    workload = (
        f"{wl.get('source', '?')}, {wl.get('prompts', '?')} prompts, "
        f"{wl.get('prompt_tokens_mean', 0):.0f} tokens mean ({wl.get('token_count_method', '?')})"
        if wl
        else "–"
    )
    stopped = f"{c.stopped}: {c.stop_detail}" if c.stopped else c.saturated_at or "–"
    return [c.name, c.url, c.api, params or "–", fmt(c.price_per_hour), workload, c.error or "", stopped]


def server_table(results: BenchResults) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of server-side figures (from the targets' /metrics); no rows when none had any."""
    levels = [lv for lv in results.levels() if lv.server_figures]
    shown = [(k, label) for k, label, _ in SHOWN if any(k in lv.server_figures for lv in levels)]
    rows = [[lv.config, lv.level] + [fmt(lv.server_figures.get(k), 4) for k, _ in shown] for lv in levels]
    return ["configuration", "level", *(h for _, h in shown)], rows


def conversation_table(results: BenchResults) -> tuple[list[str], list[list[str]]]:
    """Conversations: TTFT (s) by turn, the later turns', goodput and prefix reuse; no rows without."""
    levels = [lv for lv in results.levels() if lv.conversations is not None]
    turns = sorted(
        {
            int(k[4:].split("_", 1)[0])
            for lv in levels
            for k in lv.distributions
            if k.startswith("turn") and k.endswith("_p50")
        }
    )
    headers = [
        "configuration",
        "level",
        "completed",
        "cut",
        "unfinished",
        *(f"turn {n} TTFT p50 / p90 / p99 s" for n in turns),
        "later turns TTFT p50 s",
        "later turns TTFT p90 s",
        "goodput req/s",
        "prefix reuse",
    ]
    rows = []
    for lv in levels:
        c = lv.conversations or {}
        by_turn = [
            " / ".join(fmt(lv.get(f"turn{n}_ttft_s_{q}"), 3) for q in ("p50", "p90", "p99")) for n in turns
        ]
        rows.append(
            [
                lv.config,
                lv.level,
                str(c.get("completed", 0)),
                str(c.get("cut", 0)),
                str(c.get("unfinished", 0)),
                *by_turn,
                fmt(lv.get("later_turn_ttft_s_p50"), 4),
                fmt(lv.get("later_turn_ttft_s_p90"), 4),
                fmt(lv.goodput_rps),
                fmt(lv.server_figures.get("server_prefix_reuse"), 4),
            ]
        )
    return headers, rows
