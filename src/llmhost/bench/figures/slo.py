"""Goodput: requests per second that met every bound of a service-level objective (SLO).

The bounds are per request, in milliseconds, and a request is good when it succeeded and meets all
the bounds given (``≤``, as vLLM compares):

- ``ttft``: its time to first token;
- ``tpot``: its time per output token after the first, (last token − first token) / (tokens − 1);
  a request of one token has none and meets it (vLLM counts its TPOT as 0);
- ``itl``: its longest gap between two streamed token events (no stall longer than this). vLLM has
  no per-request ITL bound; this one is stricter than ``tpot``, which averages the gaps;
- ``e2e``: its end-to-end latency, sent → last byte.

vLLM's names are accepted as they are (``ttft``, ``tpot``, ``e2el``), so ``--goodput ttft:200
tpot:50`` means what it means to ``vllm bench serve``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

# accepted key → canonical key
KEYS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2e", "e2el": "e2e"}
HELP = (
    "Goodput SLO, KEY:MS pairs (repeatable, or several in one value separated by spaces or commas): "
    "ttft (time to first token), tpot (time per output token after the first, as vLLM), itl "
    "(longest gap between streamed tokens), e2e or e2el (sent → last byte). Goodput = successful "
    "requests/s meeting every bound given."
)


@dataclass(frozen=True)
class GoodputSLO:
    """Per-request bounds in milliseconds; ``None`` for a bound not given."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None

    def __post_init__(self) -> None:
        values = [v for v in asdict(self).values() if v is not None]
        if not values:
            raise ValueError("a goodput SLO needs at least one bound (ttft, tpot, itl, e2e)")
        if any(v <= 0 for v in values):
            raise ValueError("goodput bounds are positive milliseconds")

    @classmethod
    def from_mapping(cls, bounds: Mapping[str, float]) -> GoodputSLO:
        """From ``{"ttft": 200, "tpot": 50}`` (vLLM's ``e2el`` accepted for ``e2e``)."""
        out: dict[str, float] = {}
        for key, value in bounds.items():
            canon = KEYS.get(key.strip().lower())
            if canon is None:
                raise ValueError(f"unknown goodput key {key!r}; use {', '.join(KEYS)}")
            if canon in out:
                raise ValueError(f"goodput key {key!r} given twice")
            out[canon] = float(value)
        return cls(**{f"{k}_ms": v for k, v in out.items()})

    def to_json(self) -> dict[str, float]:
        """Canonical keys → milliseconds, the bounds given only."""
        return {k.removesuffix("_ms"): v for k, v in asdict(self).items() if v is not None}

    def describe(self) -> str:
        names = {"ttft": "TTFT", "tpot": "TPOT", "itl": "max ITL", "e2e": "E2E"}
        return ", ".join(f"{names[k]} ≤ {v:g} ms" for k, v in self.to_json().items())

    def meets(
        self, *, ttft_s: float | None, tpot_s: float | None, max_itl_s: float | None, e2e_s: float | None
    ) -> bool:
        """Whether one successful request meets every bound (a figure the request lacks — the TPOT or
        ITL of a one-token answer — is taken as 0, as vLLM does for TPOT)."""
        for bound_ms, value in (
            (self.ttft_ms, ttft_s),
            (self.tpot_ms, tpot_s),
            (self.itl_ms, max_itl_s),
            (self.e2e_ms, e2e_s),
        ):
            if bound_ms is not None and (value or 0.0) * 1000.0 > bound_ms:
                return False
        return True


def parse_goodput(items: Iterable[str]) -> dict[str, float]:
    """``["ttft:200 tpot:50", "e2el:2000"]`` → ``{"ttft": 200.0, "tpot": 50.0, "e2e": 2000.0}``."""
    bounds: dict[str, float] = {}
    for item in items:
        for pair in re.split(r"[\s,]+", item.strip()):
            if not pair:
                continue
            key, sep, value = pair.partition(":")
            if not sep:
                raise ValueError(f"goodput bound {pair!r}: expected KEY:MS, e.g. ttft:200")
            try:
                ms = float(value)
            except ValueError as exc:
                raise ValueError(f"goodput bound {pair!r}: {value!r} is not a number of ms") from exc
            canon = KEYS.get(key.strip().lower())
            if canon is None:
                raise ValueError(f"unknown goodput key {key!r}; use {', '.join(KEYS)}")
            if canon in bounds:
                raise ValueError(f"goodput key {key!r} given twice")
            bounds[canon] = ms
    GoodputSLO.from_mapping(bounds)  # validates the values
    return bounds
