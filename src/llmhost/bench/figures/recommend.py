"""Recommendations over configurations × levels: the four choices below.

- Most cost-effective: lowest cost per 1M output tokens at the chosen concurrency (default: the
  highest concurrency every configuration ran).
- Best throughput: highest output tokens/s at any level.
- Best latency: lowest p50 ms per token at the lowest concurrency measured.
- SLO: the cheapest level of any configuration whose p50 ms/token and/or p50 TTFT meet the bounds.
- Best goodput (when a goodput SLO was given): most successful requests/s meeting it, at any level.

Only levels whose success rate reaches ``min_success_pct`` compete. Without prices, "cheapest"
falls back to "highest throughput" (the same order when every configuration costs the same per hour).
"""

from __future__ import annotations

from llmhost.bench.figures.metrics import LevelSummary
from llmhost.bench.results import ConfigResult, Recommendation


def _figures(lv: LevelSummary) -> dict[str, float | None]:
    return {
        "concurrency": float(lv.concurrency) if lv.concurrency is not None else None,
        "rate_rps": lv.rate_rps,
        "output_tokens_per_s": lv.output_tokens_per_s,
        "ms_per_token_p50": lv.get("ms_per_token_p50"),
        "ttft_s_p50": lv.get("ttft_s_p50"),
        "tpot_s_p50": lv.get("tpot_s_p50"),
        "itl_s_p50": lv.get("itl_s_p50"),
        "goodput_rps": lv.goodput_rps,
        "success_pct": lv.success_pct,
        "price_per_hour": lv.price_per_hour,
        "cost_per_1m_tokens_usd": lv.cost_per_1m_tokens_usd,
        "blended_price_per_1m_tokens_usd": lv.blended_price_per_1m_tokens_usd,
    }


def _cheapest(levels: list[LevelSummary]) -> tuple[LevelSummary, str, float] | None:
    """The cheapest level (by cost per 1M tokens, or by throughput when any is unpriced)."""
    if not levels:
        return None
    if all(lv.cost_per_1m_tokens_usd is not None for lv in levels):
        best = min(levels, key=lambda lv: (lv.cost_per_1m_tokens_usd or 0.0, -lv.output_tokens_per_s))
        return best, "cost_per_1m_tokens_usd", float(best.cost_per_1m_tokens_usd or 0.0)
    best = max(levels, key=lambda lv: lv.output_tokens_per_s)
    return best, "output_tokens_per_s", best.output_tokens_per_s


def _rec(goal: str, title: str, pick: tuple[LevelSummary, str, float] | None, note: str) -> Recommendation:
    if pick is None:
        return Recommendation(goal, title, None, None, "", None, note or "no level qualified")
    lv, metric, value = pick
    return Recommendation(goal, title, lv.config, lv.level, metric, value, note, _figures(lv))


def recommend(
    configs: list[ConfigResult],
    *,
    at_concurrency: float | None = None,
    slo_ms_per_token: float | None = None,
    slo_ttft_ms: float | None = None,
    min_success_pct: float = 95.0,
) -> list[Recommendation]:
    levels = [
        lv for c in configs for lv in c.levels if lv.successes > 0 and lv.success_pct >= min_success_pct
    ]
    recs = [
        _most_cost_effective(configs, levels, at_concurrency),
        _best_throughput(levels),
        _best_latency(levels),
    ]
    if slo_ms_per_token is not None or slo_ttft_ms is not None:
        recs.append(_cheapest_meeting_slo(levels, slo_ms_per_token, slo_ttft_ms))
    goodput = _best_goodput(levels)
    if goodput is not None:
        recs.append(goodput)
    return recs


def _most_cost_effective(
    configs: list[ConfigResult], levels: list[LevelSummary], at_concurrency: float | None
) -> Recommendation:
    """Most cost-effective at the chosen load (default: the highest load every configuration ran)."""
    if at_concurrency is None:
        per_config = [{lv.load for lv in c.levels} for c in configs if c.levels]
        common = set.intersection(*per_config) if per_config else set()
        at_concurrency = max(common) if common else None
    at = [lv for lv in levels if at_concurrency is not None and lv.load == at_concurrency]
    pick = _cheapest(at)
    note = f"at load {at_concurrency:g}" if at_concurrency is not None else "no load level common to all"
    if pick is not None and pick[1] != "cost_per_1m_tokens_usd":
        note += "; no price per hour for every configuration, ranked by throughput"
    return _rec("most_cost_effective", "Most cost-effective", pick, note)


def _best_throughput(levels: list[LevelSummary]) -> Recommendation:
    best_tp = max(levels, key=lambda lv: lv.output_tokens_per_s, default=None)
    return _rec(
        "best_throughput",
        "Best throughput",
        (best_tp, "output_tokens_per_s", best_tp.output_tokens_per_s) if best_tp else None,
        "highest output tokens/s at any level",
    )


def _best_latency(levels: list[LevelSummary]) -> Recommendation:
    """Best latency at the lowest load."""
    low = min((lv.load for lv in levels), default=None)
    lat_levels = [lv for lv in levels if lv.load == low and lv.get("ms_per_token_p50") is not None]
    best_lat = min(lat_levels, key=lambda lv: lv.get("ms_per_token_p50") or 0.0, default=None)
    return _rec(
        "best_latency",
        "Best latency",
        (best_lat, "ms_per_token_p50", float(best_lat.get("ms_per_token_p50") or 0.0)) if best_lat else None,
        f"lowest p50 ms/token at load {low:g}" if low is not None else "",
    )


def _cheapest_meeting_slo(
    levels: list[LevelSummary], slo_ms_per_token: float | None, slo_ttft_ms: float | None
) -> Recommendation:
    bounds = []
    if slo_ms_per_token is not None:
        bounds.append(f"p50 ms/token ≤ {slo_ms_per_token:g}")
    if slo_ttft_ms is not None:
        bounds.append(f"p50 TTFT ≤ {slo_ttft_ms:g} ms")

    def meets(lv: LevelSummary) -> bool:
        mpt = lv.get("ms_per_token_p50")
        ttft = lv.get("ttft_s_p50")
        if slo_ms_per_token is not None and (mpt is None or mpt > slo_ms_per_token):
            return False
        return not (slo_ttft_ms is not None and (ttft is None or ttft * 1000.0 > slo_ttft_ms))

    pick = _cheapest([lv for lv in levels if meets(lv)])
    text = " and ".join(bounds)
    note = f"cheapest meeting {text}" if pick else f"no configuration meets {text}"
    return _rec("slo", f"Cheapest meeting SLO ({text})", pick, note)


def _best_goodput(levels: list[LevelSummary]) -> Recommendation | None:
    """Most requests/s meeting every per-request bound of the goodput SLO; None without one."""
    with_goodput = [lv for lv in levels if lv.goodput_rps is not None]
    if not with_goodput:
        return None
    best_gp = max(with_goodput, key=lambda lv: (lv.goodput_rps or 0.0, lv.output_tokens_per_s))
    return _rec(
        "best_goodput",
        "Best goodput",
        (best_gp, "goodput_rps", float(best_gp.goodput_rps or 0.0)),
        "most successful requests/s meeting the goodput SLO at any level",
    )
