"""Open-loop arrivals: gamma gaps with vLLM's burstiness; the mean rate holds, seeds reproduce."""

from __future__ import annotations

import random
import statistics

import pytest

from llmhost.bench.load.arrivals import Arrivals
from llmhost.bench.load.loadgen import LoadSettings


def _gaps(rate: float, burstiness: float, seed: int, n: int = 20000) -> list[float]:
    rng = random.Random(seed)
    arrivals = Arrivals(rate, burstiness)
    return [arrivals.gap_s(rng) for _ in range(n)]


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_mean_rate_holds_and_burstiness_sets_the_spread(burstiness: float) -> None:
    gaps = _gaps(5.0, burstiness, seed=7)
    # 20000 draws: the sample mean is within 4 standard errors of 1/rate
    assert statistics.fmean(gaps) == pytest.approx(0.2, rel=4 / (burstiness * 20000) ** 0.5)
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert cv == pytest.approx(burstiness**-0.5, rel=0.1)  # gamma: CV = 1 / sqrt(shape)


def test_seeded_draws_reproduce() -> None:
    assert _gaps(2.0, 0.5, seed=3, n=50) == _gaps(2.0, 0.5, seed=3, n=50)
    assert _gaps(2.0, 0.5, seed=3, n=50) != _gaps(2.0, 0.5, seed=4, n=50)


def test_poisson_is_the_exponential_draw_itself() -> None:
    # burstiness 1 keeps the arrivals a seed gave before burstiness existed
    rng = random.Random(11)
    assert _gaps(3.0, 1.0, seed=11, n=20) == [rng.expovariate(3.0) for _ in range(20)]


@pytest.mark.parametrize(("rate", "burstiness"), [(0.0, 1.0), (1.0, 0.0), (1.0, -2.0)])
def test_invalid(rate: float, burstiness: float) -> None:
    with pytest.raises(ValueError):
        Arrivals(rate, burstiness)


def test_load_settings_refuse_a_bad_burstiness() -> None:
    with pytest.raises(ValueError, match="burstiness"):
        LoadSettings(requests=1, burstiness=0.0)
