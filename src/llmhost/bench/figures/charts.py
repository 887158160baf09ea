"""The report's charts: matplotlib figures rendered to SVG text that is inlined into ``report.html``.

Figures are built on :class:`matplotlib.figure.Figure` with the Agg canvas directly, never pyplot, so
no global figure state is kept between reports. Output is deterministic (a fixed hash salt per chart,
no creation date), so two reports of the same results are byte-identical. Each chart's marks carry
ids (``series-…`` for a line, ``bar-…`` for a bar) that the page's check script and tests look for.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager

import matplotlib
from markupsafe import Markup, escape
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
FIGSIZE_IN = (5.6, 3.2)  # 560 × 320 px at 100 dpi, the size the report's layout was made for

Series = list[tuple[str, list[tuple[float, float]]]]  # (configuration name, [(load, value), ...])


@contextmanager
def _svg_settings(salt: str) -> Iterator[None]:
    # text stays <text> (no font glyph definitions repeated in every chart); '$' in a configuration
    # name is not TeX; the hash salt makes clip-path ids stable, and unique per chart within the page
    with matplotlib.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": salt, "text.parse_math": False, "font.size": 9}
    ):
        yield


def _to_svg(fig: Figure, title: str) -> Markup:
    FigureCanvasAgg(fig)
    buf = io.StringIO()
    # no metadata: no date (deterministic) and no links to external vocabularies in an offline page
    none = {"Date": None, "Creator": None, "Format": None, "Type": None}
    fig.savefig(buf, format="svg", metadata=none)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML declaration and DOCTYPE: the SVG is inlined in HTML
    attrs = f'<svg class="chart" role="img" aria-label="{escape(title)}" '
    return Markup(re.sub(r"^<svg ", attrs, svg, count=1))


def _new_axes(title: str, y_label: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIGSIZE_IN, dpi=100, layout="constrained")
    ax = fig.subplots()
    ax.set_title(title, fontweight="bold")
    ax.set_ylabel(y_label)
    ax.grid(axis="y", color="#eee")
    ax.set_axisbelow(True)
    return fig, ax


def _no_data(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def line_chart(chart_id: str, title: str, series: Series, x_label: str, y_label: str) -> Markup:
    """Lines of a figure against load, one per configuration; loads are evenly spaced categories."""
    with _svg_settings(chart_id):
        fig, ax = _new_axes(title, y_label)
        ax.set_xlabel(x_label)
        xs = sorted({x for _, pts in series for x, _ in pts})
        for i, (name, pts) in enumerate(series):
            pts = sorted(pts)
            line = ax.plot(
                [xs.index(x) for x, _ in pts],
                [y for _, y in pts],
                marker="o",
                markersize=4,
                color=COLORS[i % len(COLORS)],
                label=name[:18],
            )[0]
            line.set_gid(f"series-{chart_id}-{i}")
        if not xs:
            _no_data(ax)
        else:
            ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs])
            ax.set_ylim(bottom=0)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return _to_svg(fig, title)


def bar_chart(
    chart_id: str, title: str, bars: list[tuple[str, float]], y_label: str, labels: list[str]
) -> Markup:
    """One bar per configuration, each labelled with its ``labels`` entry (the value, formatted)."""
    with _svg_settings(chart_id):
        fig, ax = _new_axes(title, y_label)
        if not bars:
            _no_data(ax)
            return _to_svg(fig, title)
        names = [name[:16] for name, _ in bars]
        colors = [COLORS[i % len(COLORS)] for i in range(len(bars))]
        container = ax.bar(range(len(bars)), [v for _, v in bars], width=0.7, color=colors)
        for i, patch in enumerate(container.patches):
            patch.set_gid(f"bar-{chart_id}-{i}")
        ax.bar_label(container, labels=labels, fontsize=8)
        ax.set_xticks(range(len(bars)), names)
        ax.yaxis.set_major_locator(MaxNLocator(5))
        ax.margins(y=0.12)  # room for the value labels above the tallest bar
        return _to_svg(fig, title)
