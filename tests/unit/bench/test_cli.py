"""`llmhost bench run` and `compare` through the typer app."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from llmhost.bench.cli import app


def test_run_and_compare(fake_url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    outs = []
    # 8 tokens 20-40 ms apart: a TPOT the client measures even when a busy host stalls it for a while (at 2
    # and 4 ms, a stall of 14 ms read all 8 tokens at once: TPOT 0, and no blended price)
    for name, itl in (("a", "0.04"), ("b", "0.02")):
        out = tmp_path / name
        result = runner.invoke(
            app,
            [
                "run",
                "--url",
                fake_url,
                "--api",
                "chat",
                "--concurrency",
                "1,2",
                "--requests",
                "4",
                "--prompt-tokens",
                "16",
                "--max-new-tokens",
                "8",
                "--price-per-hour",
                "1.52",
                "--discount",
                "0.25",
                "--warmup",
                "1",
                "--header",
                "X-Fake-TTFT: 0.01",
                "--header",
                f"X-Fake-ITL: {itl}",
                "--goodput",
                "ttft:5000 tpot:1000",
                "--goodput",
                "e2el:0.001",
                "--out",
                str(out),
                "--no-live",
            ],
        )
        assert result.exit_code == 0, result.output
        assert "c=2" in result.output
        outs.append(out)
        for f in ("requests.jsonl", "summary.json", "summary.csv", "report.html"):
            assert (out / f).exists()
        summary = json.loads((out / "summary.json").read_text())
        lv = summary["configs"][0]["levels"][1]
        assert lv["successes"] == 4 and lv["cost_per_1m_tokens_usd"] > 0
        assert lv["blended_price_per_1m_tokens_usd"] > 0 and lv["discount"] == 0.25
        # vLLM's e2el bound of 1 µs: no request meets it, so goodput is 0 while req/s is not
        assert summary["settings"]["goodput"] == {"ttft": 5000, "tpot": 1000, "e2e": 0.001}
        assert lv["good_requests"] == 0 and lv["goodput_rps"] == 0.0 and lv["requests_per_s"] > 0
    result = runner.invoke(app, ["compare", str(outs[0]), str(outs[1])])
    assert result.exit_code == 0, result.output
    assert "output_tokens_per_s" in result.output and "B / A" in result.output


def test_bad_arguments(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["run", "--url", "http://127.0.0.1:9", "--api", "grpc", "--no-live"])
    assert result.exit_code != 0
    result = runner.invoke(app, ["run", "--url", "http://127.0.0.1:9", "--concurrency", "x", "--no-live"])
    assert result.exit_code != 0
    for bad in ("ttft=200", "tbt:20", "ttft:-1"):
        result = runner.invoke(app, ["run", "--url", "http://127.0.0.1:9", "--goodput", bad, "--no-live"])
        assert result.exit_code != 0 and "goodput" in result.output
    result = runner.invoke(app, ["run", "--url", "http://127.0.0.1:9", "--rate", "1", "--burstiness", "0"])
    assert result.exit_code != 0 and "burstiness" in result.output


def test_bench_run_options_are_bench_configs_fields() -> None:
    """`bench run` takes its options from BenchConfig: unset, they give BenchConfig's defaults."""
    from llmhost.bench.config import BenchConfig

    given = {option.flag or name: default for name, option, default in BenchConfig.run_options()}
    assert BenchConfig.from_run_options({**given, "url": "http://x"}) == BenchConfig(url="http://x")
    help_text = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "300"}).output
    for name, option, _ in BenchConfig.run_options():
        assert "--" + (option.flag or name).replace("_", "-") in help_text, name
