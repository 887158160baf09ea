"""Saturation: stop raising the load once throughput stops growing while latency grows."""

from __future__ import annotations

import pytest

from llmhost.bench.figures.metrics import LevelSummary
from llmhost.bench.figures.saturation import SaturationRule


def _lv(conc: int, tok_s: float, e2e_p50: float) -> LevelSummary:
    return LevelSummary(
        config="x",
        level=f"c={conc}",
        mode="closed",
        concurrency=conc,
        rate_rps=None,
        requests=8,
        successes=8,
        success_pct=100.0,
        errors={},
        wall_s=1.0,
        requests_per_s=8.0,
        output_tokens_per_s=tok_s,
        input_tokens_per_s=0.0,
        output_tokens=int(tok_s),
        input_tokens=0,
        mean_in_flight=float(conc),
        distributions={"e2e_s_p50": e2e_p50},
    )


RULE = SaturationRule(0.05)


def test_growing_throughput_is_not_saturation() -> None:
    assert RULE.check([_lv(1, 100, 1.0)]) is None
    assert RULE.check([_lv(1, 100, 1.0), _lv(2, 180, 1.1)]) is None


def test_flat_throughput_with_rising_latency_is_saturation() -> None:
    why = RULE.check([_lv(1, 100, 1.0), _lv(2, 180, 1.1), _lv(4, 183, 2.2)])
    assert why is not None and why.startswith("c=4:") and "over c=2" in why and "+100.0%" in why


def test_flat_throughput_with_flat_latency_is_not() -> None:
    # the load did not change anything (e.g. a client-side cap): no reason to stop
    assert RULE.check([_lv(2, 180, 1.1), _lv(4, 182, 1.12)]) is None


def test_compares_with_the_best_earlier_level_not_the_previous_one() -> None:
    # a noisy dip at c=4 must not make c=8's return to the plateau look like growth
    levels = [_lv(1, 100, 1.0), _lv(2, 200, 1.0), _lv(4, 150, 2.0), _lv(8, 201, 4.0)]
    why = RULE.check(levels)
    assert why is not None and "over c=2" in why


def test_falling_throughput_is_saturation_and_lower_load_is_ignored() -> None:
    assert RULE.check([_lv(1, 100, 1.0), _lv(2, 60, 3.0)]) is not None
    assert RULE.check([_lv(4, 200, 2.0), _lv(2, 150, 1.0)]) is None  # load fell: nothing to judge


def test_threshold() -> None:
    levels = [_lv(1, 100, 1.0), _lv(2, 110, 1.5)]  # +10% throughput, +50% latency
    assert SaturationRule(0.05).check(levels) is None
    assert SaturationRule(0.2).check(levels) is not None
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError):
            SaturationRule(bad)
