"""`--goodput` bounds: parsing (vLLM's form and ours) and validation."""

from __future__ import annotations

import pytest

from llmhost.bench.figures.slo import GoodputSLO, parse_goodput


def test_parse_forms() -> None:
    assert parse_goodput(["ttft:200 tpot:50"]) == {"ttft": 200.0, "tpot": 50.0}
    assert parse_goodput(["ttft:200", "itl:80,e2e:2000"]) == {"ttft": 200.0, "itl": 80.0, "e2e": 2000.0}
    assert parse_goodput(["E2EL:1500"]) == {"e2e": 1500.0}  # vLLM's name, any case
    slo = GoodputSLO.from_mapping(parse_goodput(["ttft:200 tpot:50 e2el:900"]))
    assert slo == GoodputSLO(ttft_ms=200, tpot_ms=50, e2e_ms=900)
    assert slo.to_json() == {"ttft": 200, "tpot": 50, "e2e": 900}
    assert slo.describe() == "TTFT ≤ 200 ms, TPOT ≤ 50 ms, E2E ≤ 900 ms"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["ttft=200"], "expected KEY:MS"),
        (["ttft:fast"], "not a number"),
        (["tbt:20"], "unknown goodput key"),
        (["e2e:100 e2el:200"], "given twice"),
        (["ttft:0"], "positive"),
        ([""], "at least one bound"),
    ],
)
def test_parse_errors(items: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_goodput(items)


def test_bounds_are_inclusive_and_missing_figures_count_as_zero() -> None:
    slo = GoodputSLO(ttft_ms=200, tpot_ms=50, itl_ms=100)
    assert slo.meets(ttft_s=0.2, tpot_s=0.05, max_itl_s=0.1, e2e_s=9.0)
    assert not slo.meets(ttft_s=0.2001, tpot_s=0.05, max_itl_s=0.1, e2e_s=9.0)
    assert slo.meets(ttft_s=0.1, tpot_s=None, max_itl_s=None, e2e_s=0.1)  # a one-token answer
