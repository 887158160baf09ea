"""`llmhost tune`'s pure logic: the space, the SLO verdict, the search's order and pruning, the choice,
the outputs and the report (in headless Chromium). Level figures are fabricated; nothing is timed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import tests.unit.bench.test_report as bench_report
from llmhost.bench.figures.metrics import RequestRecord, summarize_level
from llmhost.bench.figures.slo import GoodputSLO
from llmhost.bench.process import ENDPOINT_COPY_MEMORY_MB
from llmhost.endpoint.spec import parse_endpoint
from llmhost.tune import Candidate, SearchSpace, TuneSettings, TuneSLO
from llmhost.tune.outputs import ENDPOINT_YAML, TUNE_JSON, TUNE_REPORT, endpoint_doc, write_outputs
from llmhost.tune.report import pareto
from llmhost.tune.runner import initial_records
from llmhost.tune.search import Search, corners
from llmhost.tune.slo import LevelOutcome, judge
from llmhost.tune.state import CandidateRecord, CandidateState, best_goodput, cheapest

SLO = TuneSLO(ttft_ms=500, itl_ms=50, percentile=90)


def level(name: str, goodput: float, meets: bool, tok_s: float = 100.0, conc: int = 1) -> LevelOutcome:
    return LevelOutcome(
        level=f"c={conc}",
        concurrency=conc,
        requests=8,
        success_pct=100.0,
        output_tokens_per_s=tok_s,
        per_user_tokens_per_s=30.0 if meets else 10.0,
        ttft_ms=100.0 if meets else 900.0,
        tpot_ms=33.0 if meets else 100.0,
        itl_ms=30.0,
        goodput_rps=goodput,
        cost_per_1m_tokens_usd=1.0 / tok_s,
        meets_slo=meets,
        why="" if meets else "p90 TTFT 900 ms > 500",
    )


def rec(cand: Candidate, *levels: LevelOutcome) -> CandidateRecord:
    return CandidateRecord(cand, CandidateState.MEASURED, levels=list(levels))


def test_space_fits_cpus_and_keeps_cpus_for_the_router() -> None:
    space = SearchSpace(host_cpus=4, copies=(1, 2), threads=(1, 2, 4), max_concurrent=(4,), router_cpus=1)
    assert len(space.grid()) == 6
    fits = {c.name: space.unfit_reason(c) for c in space.grid()}
    assert fits["x1-t4-mc4-b512"] is None  # one copy: `llmhost serve`, no router
    assert fits["x2-t1-mc4-b512"] is None  # 2 × 1 + 1 for the router ≤ 4
    assert "router" in (fits["x2-t2-mc4-b512"] or "")  # 2 × 2 + 1 > 4
    assert "exceed" in (fits["x2-t4-mc4-b512"] or "")
    shared = SearchSpace(host_cpus=4, copies=(2,), threads=(2,))  # default: the router shares CPUs
    assert shared.router_cpus == 0 and shared.unfit_reason(shared.grid()[0]) is None
    assert SearchSpace(host_cpus=6).axes()["threads"] == (1, 2, 4, 6)
    spec = SearchSpace(host_cpus=4, copies=(2,), threads=(1,), speculative=(True,))
    assert "speculation" in (spec.unfit_reason(spec.grid()[0]) or "")
    with pytest.raises(ValueError):
        SearchSpace(host_cpus=2, max_concurrent=(0,))
    with pytest.raises(ValueError):
        TuneSLO(ttft_ms=100, itl_ms=10, percentile=75)


def _summary(ttft: float, tpot: float, n: int = 10, fail: int = 0):  # type: ignore[no-untyped-def]
    recs = []
    for i in range(n):
        r = RequestRecord("c", "c=2", i, 0.0, False, prompt_tokens=8)
        if i < n - fail:
            r.finish_ok([ttft + tpot * k for k in range(9)], ttft + tpot * 8, 9)
        else:
            r.error = "http_5xx"
        recs.append(r)
    return summarize_level(
        recs,
        config="c",
        level="c=2",
        mode="closed",
        concurrency=2,
        rate_rps=None,
        wall_s=2.0,
        price_per_hour=1.0,
        slo=GoodputSLO.from_mapping(SLO.goodput()),
    )


def test_level_verdict_bounds_ttft_and_tpot_at_the_percentile() -> None:
    ok = judge(_summary(0.1, 0.03), SLO)
    assert ok.meets_slo and ok.why == "" and ok.goodput_rps == pytest.approx(5.0)
    assert ok.per_user_tokens_per_s == pytest.approx(1000 / ok.tpot_ms)  # type: ignore[operator]
    slow = judge(_summary(0.1, 0.08), SLO)
    assert not slow.meets_slo and "TPOT" in slow.why and slow.goodput_rps == 0.0
    failing = judge(_summary(0.1, 0.03, fail=2), SLO)  # 80% succeeded < 90%
    assert not failing.meets_slo and "succeeded" in failing.why


def test_a_candidate_missing_the_slo_is_never_chosen() -> None:
    fast_but_late = rec(Candidate(1, 2, 8, 512), level("x", 9.0, False, tok_s=500.0))
    good = rec(Candidate(1, 2, 4, 512), level("y", 3.0, True, tok_s=200.0), level("y", 9.5, False, conc=4))
    cheap = rec(Candidate(1, 1, 4, 512), level("z", 2.0, True, tok_s=300.0))
    spec = rec(Candidate(1, 2, 4, 512, speculative=True), level("s", 6.0, True, tok_s=250.0))
    records = [fast_but_late, good, cheap, spec]
    assert best_goodput(records).name == "x1-t2-mc4-b512-ngram"  # type: ignore[union-attr]
    assert best_goodput(records[:3]).name == "x1-t2-mc4-b512"  # type: ignore[union-attr]
    assert cheapest(records).name == "x1-t1-mc4-b512"  # type: ignore[union-attr]
    assert best_goodput([fast_but_late]) is None


def test_search_measures_corners_first_then_refines_near_the_best() -> None:
    space = SearchSpace(host_cpus=4, threads=(1, 2, 4), max_concurrent=(1, 4, 8))
    grid = space.grid()
    # the candidates using the most CPUs and sequences first: the likeliest answers under a budget
    assert len(corners(grid)) == 4 and corners(grid)[0].name == "x1-t4-mc8-b512"
    search = Search(space.axes(), SLO, prune_ratio=0.5)
    records = initial_records(space)
    assert records[0].candidate.baseline and len(records) == 10
    by_name = {r.candidate.name: r for r in records}
    seen = []
    while (step := search.next(records)) is not None and step[1] == "corner":
        r, _ = step
        seen.append(r.candidate.name)
        r.state = CandidateState.MEASURED
        r.levels = [level(r.candidate.name, 4.0 if r.candidate.threads == 4 else 1.0, True)]
    assert seen == ["x1-t4-mc8-b512", "x1-t4-mc1-b512", "x1-t1-mc8-b512", "x1-t1-mc1-b512"]
    # t1 corners reach 1.0 < 0.5 × 4.0: the t1 line between mc1 and mc8 is dominated
    assert by_name["x1-t1-mc4-b512"].state is CandidateState.PRUNED
    assert "50%" in by_name["x1-t1-mc4-b512"].reason
    # one grid step from the best corner (x1-t4-mc1), fewer CPUs first on a tie
    assert step is not None and step[0].candidate.name == "x1-t2-mc1-b512"


def test_search_prunes_what_cannot_reach_the_best_goodput() -> None:
    space = SearchSpace(host_cpus=2, copies=(1, 2), threads=(1, 2), max_concurrent=(1, 4, 8))
    search = Search(space.axes(), SLO, host_cpus=2, max_load=8)
    records = initial_records(space)
    alone = level("b", 0.17, True)  # concurrency 1: one request at a time, 0.17 req/s on 2 threads
    alone.requests_per_s = 0.17
    records[0].state, records[0].levels = CandidateState.MEASURED, [alone, level("b", 0.58, True, conc=8)]
    by_name = {r.candidate.name: r for r in records}
    search.next(records)
    # one request at a time at 0.17 req/s cannot reach 0.58: pruned, with the arithmetic
    assert by_name["x1-t2-mc1-b512"].state is CandidateState.PRUNED
    assert "1 request(s) at once, each at most 0.170 req/s" in by_name["x1-t2-mc1-b512"].reason
    assert by_name["x1-t2-mc4-b512"].state is CandidateState.PENDING  # 4 × 0.17 may reach it
    # nothing is known yet of one request alone on 1 thread: those candidates stay
    assert by_name["x1-t1-mc1-b512"].state is CandidateState.PENDING
    assert (
        Search(space.axes(), SLO, host_cpus=2).prune_reason(by_name["x2-t2-mc1-b512"].candidate, records)
        is None
    )  # no load bound given


def test_search_prunes_between_two_that_missed_the_slo() -> None:
    space = SearchSpace(host_cpus=2, threads=(2,), max_concurrent=(1, 4, 8))
    records = initial_records(space)
    for r in records[1:]:
        if r.candidate.max_concurrent in (1, 8):
            r.state, r.levels = CandidateState.MEASURED, [level("m", 0.0, False)]
    assert Search(space.axes(), SLO).next(records) is None
    assert "missed the SLO at every level" in records[2].reason


def settings(tmp_path: Path) -> TuneSettings:
    space = SearchSpace(host_cpus=2, threads=(1, 2), max_concurrent=(1, 4))
    return TuneSettings(models={None: "default"}, space=space, slo=SLO, price_per_hour=0.5, out_dir=tmp_path)


def fabricated(s: TuneSettings) -> list[CandidateRecord]:
    records = initial_records(s.space)
    records[0].state, records[0].levels = CandidateState.MEASURED, [level("b", 1.0, True, 80.0)]
    for i, r in enumerate(records[1:]):
        r.state = CandidateState.MEASURED
        r.levels = [
            level(r.candidate.name, 1.0 + i, True, 90.0 + 10 * i, 1),
            level(r.candidate.name, 8.0, False, 400.0, 2),
        ]
    records[-1].state, records[-1].levels, records[-1].reason = CandidateState.PRUNED, [], "pruned"
    return records


def test_outputs_agree_and_the_endpoint_file_parses(tmp_path: Path) -> None:
    s = settings(tmp_path)
    doc = write_outputs(s, fabricated(s), "t0")
    saved = json.loads((tmp_path / TUNE_JSON).read_text())
    assert saved["answer"] == doc["answer"]
    chosen = saved["answer"]["chosen"]
    assert chosen["name"] == "x1-t2-mc1-b512" and chosen["level"] == "c=1"  # not the faster c=2 misses
    assert saved["answer"]["goodput_vs_baseline"] == pytest.approx(3.0)
    assert saved["candidates"][0]["name"] == "baseline"
    ep = parse_endpoint(yaml.safe_load((tmp_path / ENDPOINT_YAML).read_text()))
    [comp] = ep.components
    assert comp.resources.num_cpus == 2 and comp.engine.max_concurrent == 1 and comp.copies == 1
    html = (tmp_path / TUNE_REPORT).read_text()
    assert f'data-chosen="{chosen["name"]}"' in html and 'id="pareto-chart"' in html
    assert f"{chosen['goodput_rps']:.2f}" in html


def test_no_endpoint_file_when_nothing_met_the_slo(tmp_path: Path) -> None:
    s = settings(tmp_path)
    (tmp_path / ENDPOINT_YAML).write_text("stale")
    records = initial_records(s.space)
    records[0].state, records[0].levels = CandidateState.MEASURED, [level("b", 0.0, False)]
    doc = write_outputs(s, records, "t0")
    assert doc["answer"]["chosen"] is None and not (tmp_path / ENDPOINT_YAML).exists()
    assert "No candidate met the SLO" in (tmp_path / TUNE_REPORT).read_text()


def test_ratios_against_a_baseline_that_missed_the_slo(tmp_path: Path) -> None:
    s = settings(tmp_path)
    records = fabricated(s)
    records[0].levels = [level("b", 0.0, False)]
    doc = write_outputs(s, records, "t0")
    assert doc["answer"]["chosen"] is not None and doc["answer"]["goodput_vs_baseline"] is None
    assert "n/a (the baseline met the SLO at no level)" in (tmp_path / TUNE_REPORT).read_text()


def test_endpoint_doc_for_copies_and_baseline() -> None:
    copies = CandidateRecord(Candidate(2, 3, 8, 256))
    copies.processes = {"server": {"rss_mb": 90.0}, "children": [{"rss_mb": 300.0}, {"rss_mb": 410.0}]}
    doc = endpoint_doc(copies, "default", 8, 1.5, router_cpus=1)
    spec = parse_endpoint(doc)
    assert spec.components[0].resources.threads == 3 and spec.router.num_cpus == 1
    # the largest copy's measured resident size and a quarter more, in 64 MB steps
    assert spec.components[0].resources.memory_mb == 576
    # a small copy: at least the runtime margin its own start keeps beside what it measured (150 + 64)
    copies.processes = {"server": None, "children": [{"rss_mb": 150.0}]}
    assert (
        parse_endpoint(endpoint_doc(copies, "default", 8, 1.5, router_cpus=1))
        .components[0]
        .resources.memory_mb
        == 256
    )
    base = endpoint_doc(CandidateRecord(Candidate(baseline=True)), "default", 8, 1.5, router_cpus=1)
    assert base["components"][0]["resources"]["num_cpus"] == 8 and base["components"][0]["engine"] == {}
    assert "router" not in base  # one copy: nothing to keep a router's CPUs for
    assert base["components"][0]["resources"]["memory_mb"] == ENDPOINT_COPY_MEMORY_MB  # not measured


def test_pareto_keeps_the_undominated_points() -> None:
    xy = ((1, 9), (5, 5), (4, 4), (9, 1))
    pts = [{"output_tokens_per_s": x, "per_user_tokens_per_s": y} for x, y in xy]
    assert [p["output_tokens_per_s"] for p in pareto(pts)] == [1, 5, 9]


@bench_report.needs_chromium
def test_tune_report_renders_offline_with_the_pareto_chart(tmp_path: Path) -> None:
    s = settings(tmp_path)
    write_outputs(s, fabricated(s), "t0")
    dom, console = bench_report.chromium_dom(tmp_path / TUNE_REPORT, tmp_path)
    assert console == []
    chart = re.search(r'<figure id="pareto-chart"[^>]*>(.*?)</figure>', dom, re.S)
    assert chart is not None and '<svg id="pareto-chart-svg"' in chart.group(1)
    assert "Pareto frontier" in chart.group(1)  # matplotlib names each legend text in a comment
    assert re.search(r'data-chosen="x1-t2-mc1-b512"', dom)
    known = r"http://www\.w3\.org/[^\"]*|http://purl\.org/[^\"]*|http://creativecommons\.org/[^\"]*|"
    assert "http://" not in re.sub(known + r"https?://matplotlib\.org/?", "", dom)  # nothing to fetch


def test_cli_answer_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from llmhost.tune.cli import print_answer

    s = settings(tmp_path)
    assert print_answer(write_outputs(s, fabricated(s), "t0")) == 0
    shown = capsys.readouterr().out
    assert "highest goodput: x1-t2-mc1-b512 at c=1" in shown and "goodput vs baseline: ×3.00" in shown
    records = initial_records(s.space)
    records[0].state, records[0].levels = CandidateState.MEASURED, [level("b", 0.0, False)]
    assert print_answer(write_outputs(s, records, "t0")) == 1
    assert "no endpoint file written" in capsys.readouterr().out
