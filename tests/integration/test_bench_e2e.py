"""`llmhost bench run` end to end against a real `llmhost serve` of the default model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import Server


def test_bench_run_against_llmhost_serve(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "bench",
        "run",
        "--url",
        server.url,
        "--api",
        "openai",
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--prompt-tokens",
        "32",
        "--max-new-tokens",
        "8",
        "--temperature",
        "0",
        "--price-per-hour",
        "1.52",
        "--out",
        str(out),
        "--no-live",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    [config] = summary["configs"]
    assert config["workload"]["token_count_method"] == "tokenize"
    levels = config["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["successes"] == lv["requests"] == 4
        assert lv["output_tokens"] == 4 * 8  # counted from the server's usage, EOS ignored
        assert lv["input_tokens"] == 4 * 33  # 32 + BOS, measured with the server's tokenizer
        assert lv["output_tokens_per_s"] > 0 and lv["cost_per_1m_tokens_usd"] > 0
        assert lv["distributions"]["ttft_s_p50"] > 0
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) >= 8
    assert (out / "summary.csv").exists() and (out / "report.html").exists()
