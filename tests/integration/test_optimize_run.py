"""`llmhost optimize run recipe.yaml`: on the default model, artifact, base vs optimized, benchmark.json; on a
tiny model with `merge_lora:`, the served artifact is the merged model and its recipe names the adapter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from llmhost.store import resolve_model

RECIPE = """\
model: default
out: artifact
speculative: ngram
draft_tokens: 12
threads: 1
eval_max_tokens: 64
benchmark:
  requests: 3
  warmup: 1
  concurrency: 1
  max_new_tokens: 16
  price_per_hour: 0.0832
  startup_timeout_s: 60
"""


def test_optimize_run_benchmarks_base_against_the_served_artifact(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    cmd = [sys.executable, "-m", "llmhost.cli", "optimize", "run", str(recipe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for label in ("output tok/s", "p50 TTFT (ms)", "p50 ms/token", "cost per 1M tokens"):
        assert label in proc.stdout

    art = tmp_path / "artifact"
    for name in ("model.gguf", "recipe.yaml", "quality.json", "artifact.json", "benchmark.json"):
        assert (art / name).is_file(), name
    report = json.loads((art / "benchmark.json").read_text())
    assert report["model"] == str(resolve_model("default"))
    assert report["serving"] == {"speculative": "ngram", "draft_tokens": 12, "ngram_size": 3}
    for side in ("base", "optimized"):
        lv = report[side]["level"]
        assert lv["successes"] == lv["requests"] == 3, (side, lv)
        assert lv["output_tokens_per_s"] > 0 and lv["cost_per_1m_tokens_usd"] > 0
        assert report["settings"]["max_new_tokens"] == 16
    # base served the source GGUF; optimized served the artifact directory, whose recipe.yaml
    # turned on n-gram speculation (no flag on its command line)
    assert report["base"]["served"][report["base"]["served"].index("serve") + 1] == report["model"]
    served = report["optimized"]["served"]
    assert served[served.index("serve") + 1] == str(art) and "--speculative" not in served
    assert report["base"]["metrics"]["llmhost_spec_draft_tokens_total"] == 0
    assert report["optimized"]["metrics"]["llmhost_spec_draft_tokens_total"] > 0
    assert set(report["ratios"]) == {
        "output_tokens_per_s",
        "ttft_s_p50",
        "ms_per_token_p50",
        "cost_per_1m_tokens_usd",
    }
    assert all(r is not None and r > 0 for r in report["ratios"].values())


MERGE_RECIPE = """\
model: tiny.gguf
out: merged
merge_lora: [tone.gguf:0.5]
threads: 1
eval_max_tokens: 32
benchmark:
  requests: 2
  warmup: 0
  concurrency: 1
  max_new_tokens: 8
  startup_timeout_s: 60
"""


def test_optimize_run_serves_the_merged_model_and_records_the_adapters_digest(tmp_path: Path) -> None:
    """A recipe's `merge_lora:`: the artifact served is the base with the adapter merged in (its logits
    are the base's with the adapter applied at run time, within test_optimize_merge's F16 tolerance)."""
    from llmhost.store import resolve
    from llmhost.store.artifact import sha256_file
    from tests.integration.lora_helpers import write_adapter
    from tests.integration.test_optimize_merge import logits
    from tests.tinymodels import build_tiny_gguf

    base = build_tiny_gguf(tmp_path / "tiny.gguf", arch="gemma3")
    adapter = write_adapter(tmp_path / "tone.gguf", base, seed=1, std=0.1)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(MERGE_RECIPE)
    cmd = [sys.executable, "-m", "llmhost.cli", "optimize", "run", str(recipe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    art = tmp_path / "merged"
    [merged, *_] = yaml.safe_load((art / "recipe.yaml").read_text())["steps"]
    [step] = merged["merge_lora"]
    assert step["sha256"] == sha256_file(adapter) and step["scale"] == 0.5 and step["path"] == str(adapter)
    report = json.loads((art / "benchmark.json").read_text())
    served = report["optimized"]["served"]
    assert served[served.index("serve") + 1] == str(art)
    assert report["optimized"]["level"]["successes"] == 2
    model = resolve(str(art)).gguf  # what the optimized server loaded
    at_run_time = logits(base, [(adapter, 0.5)])
    assert np.abs(at_run_time - logits(base)).max() > 1.0  # the adapter matters
    assert np.abs(logits(model) - at_run_time).max() < 0.1
