"""The growth of each process's figures over a soak (benchmarks/soak_watch.py's samples): what a leak
would leave, apart from what requests in flight and bounded caches take and give back."""

from __future__ import annotations

from typing import Any

WATCHED = ("rss_mb", "fds", "threads", "asyncio_tasks")
# a copy's RSS less its host prompt cache: the cache fills up to its budget (a bounded cache, shown apart
# as host_cache_bytes against its capacity), what grows beyond it is what a leak would be
NET_RSS = "rss_less_host_cache_mb"
WARMUP_S = 300.0  # growth is measured after this much of the run (caches and pools fill first)
WINDOW = 3  # samples whose minimum stands for the start and the end of the measured span


def series(samples: list[dict[str, Any]]) -> dict[str, list[tuple[float, dict[str, Any]]]]:
    """Each process's samples while it served: the router's, and each copy's per pid (a restart is a new
    process) while ready."""
    out: dict[str, list[tuple[float, dict[str, Any]]]] = {"router": [(s["t"], s["router"]) for s in samples]}
    for s in samples:
        for copy, figures in s["copies"].items():
            if figures.get("state") != "ready":
                continue
            if figures.get("rss_mb") is not None and figures.get("host_cache_bytes") is not None:
                net = figures["rss_mb"] - figures["host_cache_bytes"] / 2**20
                figures = {**figures, NET_RSS: round(net, 1)}
            out.setdefault(f"{copy} (pid {figures['pid']})", []).append((s["t"], figures))
    return out


def growth(samples: list[dict[str, Any]], warmup_s: float, limit_pct: float) -> dict[str, Any]:
    """Per process, after its warm-up (`warmup_s` into the run, and `warmup_s` after a copy started later
    was first seen ready): each watched figure's start and end (the least of the first and of the last
    WINDOW samples: requests in flight come and go, what a leak leaves stays) and the growth between
    them in %. A process with fewer than 2 x WINDOW samples past its warm-up (on-demand copies loaded
    and evicted within minutes) is only counted. `over` lists every figure that grew more than
    `limit_pct` (a copy's RSS judged less its host prompt cache, whose bytes are shown too)."""
    per, short, over = {}, [], []
    first = samples[0]["t"] if samples else 0.0
    for name, points in series(samples).items():
        begin = warmup_s if points[0][0] <= first else points[0][0] + warmup_s
        after = [f for t, f in points if t >= begin]
        if len(after) < 2 * WINDOW:
            short.append(name)
            continue
        figures = {}
        judged = WATCHED if after[0].get(NET_RSS) is None else (NET_RSS, *WATCHED[1:])
        for key in (*WATCHED, NET_RSS, "host_cache_bytes"):
            values = [f[key] for f in after if f.get(key) is not None]
            if len(values) < 2 * WINDOW:
                continue
            start, end = min(values[:WINDOW]), min(values[-WINDOW:])
            pct = round((end - start) / start * 100, 1) if start else None
            figures[key] = {"start": start, "end": end, "max": max(values), "growth_pct": pct}
            if key in judged and pct is not None and pct > limit_pct:
                over.append(f"{name} {key}: {start} -> {end} (+{pct}%)")
        per[name] = {"from_s": begin, "samples": len(after), **figures}
    return {
        "warmup_s": warmup_s,
        "limit_pct": limit_pct,
        "processes": per,
        "too_short": {"count": len(short), "first": short[:10]},
        "over": over,
    }
