"""``report.html`` of a tuning run: the Pareto chart (matplotlib, inline SVG) and the candidates'
table, through a Jinja2 template. Opens offline: nothing is fetched, no script runs."""

from __future__ import annotations

import io
import re
from typing import Any, TypedDict

from matplotlib.figure import Figure

from llmhost.bench.report import template_env
from llmhost.tune.doc import TuneDoc

CHART_ID = "pareto-chart"


class Point(TypedDict):
    """A measured level on the chart: total tokens/s × per-user tokens/s."""

    name: str
    baseline: bool
    level: str
    output_tokens_per_s: float
    per_user_tokens_per_s: float
    meets_slo: bool
    cost_per_1m_tokens_usd: float | None


def _points(doc: TuneDoc) -> list[Point]:
    """One point per measured level: total tokens/s × per-user tokens/s."""
    out: list[Point] = []
    for c in doc["candidates"]:
        for lv in c["levels"]:
            per_user = lv["per_user_tokens_per_s"]
            if per_user is not None and lv["output_tokens_per_s"] > 0:
                out.append(
                    {
                        "name": c["name"],
                        "baseline": c["baseline"],
                        "level": lv["level"],
                        "output_tokens_per_s": lv["output_tokens_per_s"],
                        "per_user_tokens_per_s": per_user,
                        "meets_slo": lv["meets_slo"],
                        "cost_per_1m_tokens_usd": lv["cost_per_1m_tokens_usd"],
                    }
                )
    return out


def pareto(points: list[Point]) -> list[Point]:
    """Points no other point beats on both total and per-user tokens/s, by total tokens/s."""
    front = [
        p
        for p in points
        if not any(
            q["output_tokens_per_s"] >= p["output_tokens_per_s"]
            and q["per_user_tokens_per_s"] >= p["per_user_tokens_per_s"]
            and q is not p
            and (q["output_tokens_per_s"], q["per_user_tokens_per_s"])
            != (p["output_tokens_per_s"], p["per_user_tokens_per_s"])
            for q in points
        )
    ]
    return sorted(front, key=lambda p: p["output_tokens_per_s"])


def _scatter(ax: Any, pts: list[Point], **style: Any) -> None:
    if pts:
        ax.scatter(
            [p["output_tokens_per_s"] for p in pts], [p["per_user_tokens_per_s"] for p in pts], **style
        )


def chart_svg(doc: TuneDoc) -> str:
    pts = _points(doc)
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.subplots()
    _scatter(ax, [p for p in pts if p["meets_slo"]], color="#2a7", label="meets the SLO")
    _scatter(ax, [p for p in pts if not p["meets_slo"]], color="#bbb", label="misses the SLO")
    _scatter(
        ax, [p for p in pts if p["baseline"]], facecolors="none", edgecolors="#333", s=90, label="baseline"
    )
    front = pareto(pts)
    for p in front:  # what each frontier point costs, so the trade-off reads off the chart
        if p["cost_per_1m_tokens_usd"] is not None:
            ax.annotate(
                f"{p['cost_per_1m_tokens_usd']:.3g} per 1M",
                (p["output_tokens_per_s"], p["per_user_tokens_per_s"]),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=7,
            )
    if front:
        ax.plot(
            [p["output_tokens_per_s"] for p in front],
            [p["per_user_tokens_per_s"] for p in front],
            color="#36c",
            label="Pareto frontier",
        )
    ax.axhline(
        1000.0 / doc["slo"]["itl_ms"],
        color="#c33",
        linestyle="--",
        label=f"SLO: TPOT ≤ {doc['slo']['itl_ms']:g} ms",
    )
    chosen = doc["answer"]["chosen"]
    hit = [p for p in pts if chosen and p["name"] == chosen["name"] and p["level"] == chosen["level"]]
    _scatter(ax, hit, marker="*", s=260, color="#f90", edgecolors="#000", label="chosen", zorder=5)
    ax.set_xlabel("total output tokens/s")
    ax.set_ylabel(f"per-user tokens/s (1 / p{doc['slo']['percentile']} TPOT)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]  # the XML prolog and doctype do not belong inside HTML


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "–" if v is None else format(v, spec)


def render_report(doc: TuneDoc) -> str:
    env = template_env("llmhost.tune")
    env.filters["fmt"] = _fmt
    svg = re.sub(r"^<svg ", f'<svg id="{CHART_ID}-svg" ', chart_svg(doc), count=1)
    return env.get_template("report.html.jinja").render(doc=doc, chart=svg, chart_id=CHART_ID)
