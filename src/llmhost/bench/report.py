"""The results directory: raw ``requests.jsonl`` (written as requests complete), ``summary.json``,
``summary.csv`` and ``report.html`` with inline SVG charts that open offline.
"""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path
from typing import IO, Any

from llmhost.bench.metrics import DISTRIBUTIONS, ERROR_KINDS, STATS, RequestRecord
from llmhost.bench.results import REPORT_HTML, REQUESTS_JSONL, SUMMARY_CSV, SUMMARY_JSON, BenchResults
from llmhost.bench.server_metrics import SHOWN

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")

CSV_COLUMNS = [
    "config", "level", "mode", "concurrency", "rate_rps", "requests", "successes", "success_pct",
    "wall_s", "requests_per_s", "good_requests", "goodput_rps", "output_tokens_per_s",
    "input_tokens_per_s", "output_tokens", "input_tokens", "mean_in_flight",
    *[f"{name}_{stat}" for name in DISTRIBUTIONS for stat in STATS],
    "price_per_hour", "minutes_per_1m_tokens", "cost_per_1m_tokens_usd", "total_tokens_per_s_blended",
    "blended_price_per_1m_tokens_usd", "discount", "stopped",
    *[key for key, _, _ in SHOWN],
    *[f"errors_{k}" for k in ERROR_KINDS],
]  # fmt: skip
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


def summary_csv(results: BenchResults) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for lv in results.levels():
        writer.writerow({k: ("" if v is None else v) for k, v in lv.flat().items()})
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- charts


def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "–"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    import math

    exp = 10 ** math.floor(math.log10(v))
    for step in (1, 2, 2.5, 5, 10):
        if v <= step * exp:
            return float(step * exp)
    return float(10 * exp)


def line_chart(
    title: str, series: list[tuple[str, list[tuple[float, float]]]], x_label: str, y_label: str
) -> str:
    """An SVG line chart; ``series`` are (name, [(x, y), ...])."""
    w, h, left, right, top, bottom = 560, 320, 64, 150, 34, 46
    pw, ph = w - left - right, h - top - bottom
    xs = sorted({x for _, pts in series for x, _ in pts})
    ys = [y for _, pts in series for _, y in pts]
    y_max = _nice_max(max(ys, default=0.0))
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{w / 2 - right / 2}" y="20" text-anchor="middle" class="title">'
        f"{html.escape(title)}</text>",
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#ccc"/>',
    ]
    if not xs:
        parts.append(
            f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">no data</text></svg>'
        )
        return "".join(parts)

    def px(x: float) -> float:
        if len(xs) == 1:
            return left + pw / 2
        return left + pw * xs.index(x) / (len(xs) - 1)  # categorical: levels are evenly spaced

    def py(y: float) -> float:
        return top + ph - ph * y / y_max

    for i in range(5):
        yv = y_max * i / 4
        parts.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{py(yv):.1f}" y2="{py(yv):.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{py(yv) + 4:.1f}" text-anchor="end" class="tick">{_fmt(yv)}</text>'
        )
    for x in xs:
        parts.append(
            f'<text x="{px(x):.1f}" y="{top + ph + 16}" text-anchor="middle" class="tick">{x:g}</text>'
        )
    parts.append(
        f'<text x="{left + pw / 2}" y="{h - 8}" text-anchor="middle" class="axis">'
        f"{html.escape(x_label)}</text>"
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" class="axis" '
        f'transform="rotate(-90 14 {top + ph / 2})">{html.escape(y_label)}</text>'
    )
    for si, (name, pts) in enumerate(series):
        color = COLORS[si % len(COLORS)]
        pts = sorted(pts)
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(
            f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>'
        )
        for x, y in pts:
            parts.append(
                f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{color}">'
                f"<title>{html.escape(name)}: {x:g} → {_fmt(y, 4)}</title></circle>"
            )
        ly = top + 14 + 18 * si
        parts.append(
            f'<rect x="{left + pw + 12}" y="{ly - 9}" width="12" height="12" fill="{color}"/>'
            f'<text x="{left + pw + 28}" y="{ly + 1}" class="legend">{html.escape(name[:18])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(title: str, bars: list[tuple[str, float]], y_label: str) -> str:
    w, h, left, top, bottom = 560, 320, 64, 34, 80
    pw, ph = w - left - 20, h - top - bottom
    y_max = _nice_max(max((v for _, v in bars), default=0.0))
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{w / 2}" y="20" text-anchor="middle" class="title">{html.escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#ccc"/>',
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" class="axis" '
        f'transform="rotate(-90 14 {top + ph / 2})">{html.escape(y_label)}</text>',
    ]
    if not bars:
        parts.append(
            f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">no data</text></svg>'
        )
        return "".join(parts)
    for i in range(5):
        yv = y_max * i / 4
        y = top + ph - ph * yv / y_max
        parts.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_fmt(yv)}</text>'
        )
    slot = pw / len(bars)
    for i, (name, v) in enumerate(bars):
        bh = ph * v / y_max
        x = left + slot * i + slot * 0.15
        color = COLORS[i % len(COLORS)]
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{top + ph - bh:.1f}" width="{slot * 0.7:.1f}" '
            f'height="{bh:.1f}" '
            f'fill="{color}"><title>{html.escape(name)}: {_fmt(v, 4)}</title></rect>'
            f'<text x="{x + slot * 0.35:.1f}" y="{top + ph - bh - 4:.1f}" text-anchor="middle" class="tick">'
            f"{_fmt(v)}</text>"
            f'<text x="{x + slot * 0.35:.1f}" y="{top + ph + 16}" text-anchor="middle" class="tick">'
            f"{html.escape(name[:16])}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _series(
    results: BenchResults, key: str, scale: float = 1.0
) -> list[tuple[str, list[tuple[float, float]]]]:
    out = []
    for c in results.configs:
        pts = [(lv.load, v * scale) for lv in c.levels if (v := lv.get(key)) is not None]
        if pts:
            out.append((c.name, pts))
    return out


def _table(headers: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


_PAGE_SCRIPT = """
(function () {
  // Marks the page once the charts are laid out: tests (and readers) can check they rendered.
  var charts = document.querySelectorAll("svg.chart");
  var drawn = 0;
  charts.forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    var marks = svg.querySelectorAll("polyline.series, circle.point, rect.bar").length;
    if (box.width > 0 && box.height > 0 && marks > 0) { drawn += 1; }
  });
  document.body.setAttribute("data-charts", String(charts.length));
  document.body.setAttribute("data-charts-drawn", String(drawn));
})();
"""

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
table.recommendations td:nth-child(2), table.recommendations td:last-child { text-align: left; }
table.configs td { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
svg.chart { background: #fafafa; border: 1px solid #e5e5e5; }
svg .title { font-size: 14px; font-weight: 600; } svg .tick { font-size: 11px; fill: #555; }
svg .axis { font-size: 12px; fill: #333; } svg .legend { font-size: 12px; }
.note { color: #666; font-size: 13px; } .warn { color: #b00; }
"""


def render_html(results: BenchResults) -> str:
    x_label = "concurrency" if any(lv.mode == "closed" for lv in results.levels()) else "request rate (req/s)"
    charts = [
        line_chart("Output throughput", _series(results, "output_tokens_per_s"), x_label, "output tokens/s"),
        line_chart("Latency: p50 ms per token", _series(results, "ms_per_token_p50"), x_label, "ms/token"),
        line_chart("Latency: p50 TTFT", _series(results, "ttft_s_p50", 1000.0), x_label, "TTFT (ms)"),
        line_chart("Latency: p50 inter-token", _series(results, "itl_s_p50", 1000.0), x_label, "ITL (ms)"),
    ]
    cost_rec = next((r for r in results.recommendations if r.goal == "most_cost_effective"), None)
    at_level_note = cost_rec.note if cost_rec else ""
    bars: list[tuple[str, float]] = []
    for c in results.configs:
        priced = [lv for lv in c.levels if lv.cost_per_1m_tokens_usd is not None]
        if not priced:
            continue
        at = None
        if cost_rec and cost_rec.figures:
            load = cost_rec.figures.get("concurrency") or cost_rec.figures.get("rate_rps")
            at = next((lv for lv in priced if lv.load == load), None)
        lv = at or min(priced, key=lambda x: x.cost_per_1m_tokens_usd or 0.0)
        bars.append((c.name, float(lv.cost_per_1m_tokens_usd or 0.0)))
    if bars:
        charts.append(bar_chart("Cost per 1M output tokens", bars, "USD per 1M tokens"))

    rec_rows = []
    for r in results.recommendations:
        f = r.figures
        rec_rows.append(
            [
                html.escape(r.title),
                html.escape(r.config or "–"),
                html.escape(r.level or "–"),
                _fmt(f.get("output_tokens_per_s")),
                _fmt(f.get("ms_per_token_p50")),
                _fmt((f.get("ttft_s_p50") or 0.0) * 1000.0 if f.get("ttft_s_p50") is not None else None),
                _fmt(f.get("price_per_hour")),
                _fmt(f.get("cost_per_1m_tokens_usd")),
                html.escape(r.note),
            ]
        )
    level_rows = []
    for lv in results.levels():
        errs = ", ".join(f"{k}: {v}" for k, v in sorted(lv.errors.items())) or "–"
        level_rows.append(
            [
                html.escape(lv.config),
                html.escape(lv.level),
                str(lv.requests),
                f"{lv.success_pct:.1f}",
                _fmt(lv.requests_per_s),
                _fmt(lv.goodput_rps),
                _fmt(lv.output_tokens_per_s),
                _fmt(lv.get("ttft_s_p50"), 4),
                _fmt(lv.get("ttft_s_p99"), 4),
                _fmt(lv.get("tpot_s_p50"), 4),
                _fmt(lv.get("itl_s_p50"), 4),
                _fmt(lv.get("itl_s_p99"), 4),
                _fmt(lv.get("ms_per_token_p50")),
                _fmt(lv.get("e2e_s_p50"), 4),
                _fmt(lv.minutes_per_1m_tokens),
                _fmt(lv.cost_per_1m_tokens_usd),
                _fmt(lv.blended_price_per_1m_tokens_usd),
                html.escape(errs + (f" (stopped: {lv.stopped})" if lv.stopped else "")),
            ]
        )
    config_rows = []
    for c in results.configs:
        params = ", ".join(f"{k}={v}" for k, v in c.params.items())
        wl = c.workload
        config_rows.append(
            [
                html.escape(c.name),
                html.escape(c.url),
                html.escape(c.api),
                html.escape(params or "–"),
                _fmt(c.price_per_hour),
                html.escape(
                    f"{wl.get('source', '?')}, {wl.get('prompts', '?')} prompts, "
                    f"{wl.get('prompt_tokens_mean', 0):.0f} tokens mean ({wl.get('token_count_method', '?')})"
                    if wl
                    else "–"
                ),
                html.escape(c.error or ""),
                html.escape(f"{c.stopped}: {c.stop_detail}" if c.stopped else c.saturated_at or "–"),
            ]
        )
    settings = html.escape(json.dumps(results.settings, sort_keys=True))
    warn = (
        '<p class="warn">Interrupted: figures cover what was measured before the stop.</p>'
        if results.interrupted
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>llmhost bench report</title>
<style>{_STYLE}</style></head>
<body>
<h1>llmhost bench report</h1>
<p class="note">Started {html.escape(results.started_at)}, finished {html.escape(results.finished_at)}.
Definitions, as vLLM's: TTFT: sent → first token event; TPOT: (last token event − first)/(tokens − 1),
per request; ITL: gap between consecutive token events, over all gaps; ms/token: E2E/tokens; E2E: sent
→ last byte; throughput, req/s and goodput: successful requests (goodput: those meeting the SLO) / wall
time of the level. Server figures come from the target's /metrics.</p>
{warn}
<h2>Recommendations</h2>
{
        _table(
            [
                "goal",
                "configuration",
                "level",
                "output tok/s",
                "p50 ms/token",
                "p50 TTFT ms",
                "$/h",
                "$ per 1M",
                "why",
            ],
            rec_rows,
            "recommendations",
        )
    }
<h2>Charts</h2>
<p class="note">Cost per configuration: {html.escape(at_level_note)}.</p>
<div class="charts">{"".join(charts)}</div>
<h2>Levels</h2>
{
        _table(
            [
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
            ],
            level_rows,
            "levels",
        )
    }
{server_section(results)}
<h2>Configurations</h2>
{_table(CONFIG_HEADERS, config_rows, "configs")}
<p class="note">Settings: <code>{settings}</code></p>
<script>{_PAGE_SCRIPT}</script>
</body></html>
"""


def server_section(results: BenchResults) -> str:
    """The table of server-side figures (from the targets' /metrics), empty when none had any."""
    levels = [lv for lv in results.levels() if lv.server_figures]
    if not levels:
        return ""
    shown = [(k, label) for k, label, _ in SHOWN if any(k in lv.server_figures for lv in levels)]
    rows = [
        [html.escape(lv.config), html.escape(lv.level)]
        + [_fmt(lv.server_figures.get(k), 4) for k, _ in shown]
        for lv in levels
    ]
    headers = ["configuration", "level", *(h for _, h in shown)]
    return f"<h2>Server metrics</h2>\n{_table(headers, rows, 'levels')}"


def records_from_jsonl(path: str | Path) -> list[dict[str, Any]]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(json.loads(line))
    return out
