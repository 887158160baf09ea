"""`llmhost optimize run`: recipe parsing and validation, serving settings in the artifact, the serve hook."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llmhost.bench.figures.metrics import LevelSummary
from llmhost.cli import app
from llmhost.optimize.artifact import (
    Recipe,
    write_serving_settings,
)
from llmhost.optimize.recipe_file import RecipeError, default_out, load_recipe, parse_recipe
from llmhost.optimize.recipe_run import _ratios, _spec_counters, serve_argv
from llmhost.store.artifact import (
    ARTIFACT_JSON,
    MODEL_GGUF,
    RECIPE_YAML,
    serving_hints,
    serving_settings,
    sha256_file,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults() -> None:
    r = parse_recipe({})
    assert r.model == "default" and r.quantize is None and r.speculative is None
    assert r.benchmark.builtin_prompts and r.benchmark.requests == 8 and r.benchmark.concurrency == 1
    assert r.serving() == {}
    art = r.artifact_recipe()
    assert art.quantize is None and art.system_prompt is None and art.flash_attn


def test_full_recipe_resolves_paths_against_its_file(tmp_path: Path) -> None:
    write(tmp_path / "system.txt", "You are terse.")
    write(tmp_path / "prompts.jsonl", '{"prompt": "Summarize: a b c"}\n"plain string prompt"\n')
    recipe = write(
        tmp_path / "r.yaml",
        """
model: models/x.gguf
out: art
quantize: q8_0
allow_requantize: true
system_prompt_file: system.txt
system_prompt_mode: raw
speculative: ngram
draft_tokens: 8
benchmark:
  prompts_file: prompts.jsonl
  requests: 3
  concurrency: 2
  max_new_tokens: 16
  price_per_hour: 1.52
""",
    )
    r = load_recipe(recipe)
    assert r.model == str(tmp_path / "models/x.gguf")
    assert r.out == str(tmp_path / "art")
    assert r.benchmark.prompts_file == str(tmp_path / "prompts.jsonl")
    assert r.serving() == {"speculative": "ngram", "draft_tokens": 8, "ngram_size": 3}
    art = r.artifact_recipe()
    assert art.quantize == "q8_0" and art.allow_requantize and art.system_prompt == "You are terse."
    assert art.system_prompt_mode == "raw"
    assert default_out(recipe) == tmp_path / "r-artifact"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"quantise": "q8_0"}, "quantise: unknown key"),
        ({"benchmark": {"request": 3}}, "benchmark.request: unknown key"),
        ({"quantize": "q9_9"}, "unknown quantization type 'q9_9'"),
        ({"speculative": "draft"}, "speculative"),
        ({"draft_tokens": 0}, "draft_tokens"),
        ({"system_prompt_mode": "html"}, "system_prompt_mode"),
        ({"benchmark": {"concurrency": 0}}, "benchmark.concurrency"),
        ({"benchmark": {"price_per_hour": -1}}, "benchmark.price_per_hour"),
        ({"benchmark": {"api": "tgi"}}, "benchmark.api"),
        ({"system_prompt": "a", "system_prompt_file": "b.txt"}, "not both"),
        ({"system_prompt": "  "}, "system_prompt is empty"),
        ({"system_prompt_file": "missing.txt"}, "missing.txt does not exist"),
        ({"benchmark": {"prompts_file": "missing.jsonl"}}, "benchmark.prompts_file"),
    ],
)
def test_invalid_recipes_give_clear_errors(data: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"invalid recipe|does not exist|prompts_file") as err:
        parse_recipe(data, tmp_path, "r.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("r.yaml")


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="cannot read recipe"):
        load_recipe(tmp_path / "nope.yaml")
    with pytest.raises(RecipeError, match="a recipe is a YAML mapping"):
        load_recipe(write(tmp_path / "list.yaml", "- quantize: q8_0\n"))
    with pytest.raises(RecipeError, match="not YAML"):
        load_recipe(write(tmp_path / "bad.yaml", "quantize: [q8_0\n"))
    write(tmp_path / "p.jsonl", "{not json}\n")
    with pytest.raises(RecipeError, match=r"benchmark\.prompts_file: .*not JSON"):
        parse_recipe({"benchmark": {"prompts_file": "p.jsonl"}}, tmp_path)


def test_serve_argv_matches_the_recipe(tmp_path: Path) -> None:
    write(tmp_path / "t.jinja", "{{ messages }}")
    r = parse_recipe(
        {"threads": 2, "flash_attn": False, "chat_template_file": "t.jinja", "speculative": "ngram"}, tmp_path
    )
    argv = serve_argv("/m.gguf", 1234, r)
    i = argv.index("serve")
    assert argv[i + 1 : i + 6] == ["/m.gguf", "--host", "127.0.0.1", "--port", "1234"]
    assert "--no-flash-attn" in argv and argv[argv.index("--threads") + 1] == "2"
    assert argv[argv.index("--chat-template") + 1] == str(tmp_path / "t.jinja")
    # speculation reaches the optimized server through the artifact's recipe.yaml, never as flags
    assert "--speculative" not in argv


def level(tok_s: float, ttft: float, price: float | None) -> LevelSummary:
    cost = price * 1e6 / tok_s / 3600 if price else None
    return LevelSummary(
        config="x",
        level="c=1",
        mode="closed",
        concurrency=1,
        rate_rps=None,
        requests=3,
        successes=3,
        success_pct=100.0,
        errors={},
        wall_s=1.0,
        requests_per_s=3.0,
        output_tokens_per_s=tok_s,
        input_tokens_per_s=0.0,
        output_tokens=int(tok_s),
        input_tokens=0,
        mean_in_flight=1.0,
        distributions={"ttft_s_p50": ttft, "ms_per_token_p50": 1000.0 / tok_s},
        cost_per_1m_tokens_usd=cost,
    )


def test_ratios_are_optimized_over_base() -> None:
    r = _ratios(level(50.0, 0.2, 1.0), level(100.0, 0.1, 1.0))
    assert r["output_tokens_per_s"] == pytest.approx(2.0)
    assert r["ttft_s_p50"] == pytest.approx(0.5)
    assert r["ms_per_token_p50"] == pytest.approx(0.5)
    assert r["cost_per_1m_tokens_usd"] == pytest.approx(0.5)
    assert _ratios(level(50.0, 0.2, None), level(100.0, 0.1, None))["cost_per_1m_tokens_usd"] is None


def test_spec_counters_from_metrics_text() -> None:
    text = (
        "# HELP llmhost_spec_draft_tokens_total x\nllmhost_spec_draft_tokens_total 158.0\n"
        "llmhost_spec_accepted_tokens_total 67.0\nllmhost_requests_total 4.0\n"
    )
    assert _spec_counters(text) == {
        "llmhost_spec_draft_tokens_total": 158.0,
        "llmhost_spec_accepted_tokens_total": 67.0,
    }


def fake_artifact(tmp_path: Path) -> Path:
    d = tmp_path / "art"
    d.mkdir()
    (d / MODEL_GGUF).write_bytes(b"GGUF")
    (d / RECIPE_YAML).write_text("source: x\nsteps: []\nrecipe: {quantize: null}\n")
    (d / ARTIFACT_JSON).write_text(json.dumps({"key": "k", "load": {"best": "read"}, "prefix_state": None}))
    return d


def test_serving_settings_round_trip_into_hints(tmp_path: Path) -> None:
    d = fake_artifact(tmp_path)
    assert serving_settings(d) == {}
    hints = serving_hints(d, flash_attn=True)
    assert hints is not None and hints.serving == {} and hints.load_mode == "read"
    write_serving_settings(d, {"speculative": "ngram", "draft_tokens": 8, "ngram_size": 3, "other": 1})
    assert serving_settings(d) == {"speculative": "ngram", "draft_tokens": 8, "ngram_size": 3}
    assert "recipe" in (d / RECIPE_YAML).read_text()  # the rest of recipe.yaml is kept
    hints = serving_hints(d, flash_attn=True)
    assert hints is not None
    assert hints.engine_overrides(set()) == {"speculative": "ngram", "draft_tokens": 8, "ngram_size": 3}
    assert hints.engine_overrides({"speculative"}) == {"draft_tokens": 8, "ngram_size": 3}
    write_serving_settings(d, {})
    assert serving_settings(d) == {}


def serve_engine(monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """The EngineConfig `llmhost serve ARGS` would start with (no model loaded, no server run)."""
    import llmhost.cli

    seen: dict[str, Any] = {}

    def fake_run_server(settings: Any, grace_s: float, log_level: str) -> int:
        seen["settings"] = settings
        return 0

    monkeypatch.setattr(llmhost.cli, "run_server", fake_run_server)
    result = CliRunner().invoke(app, ["serve", *args, "--port", "1"])
    assert result.exit_code == 0, result.output
    return seen["settings"].engine


def test_serve_takes_speculation_from_the_artifact_unless_flags_say_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = fake_artifact(tmp_path)
    assert serve_engine(monkeypatch, str(d)).speculative == ""
    write_serving_settings(d, {"speculative": "ngram", "draft_tokens": 5, "ngram_size": 4})
    engine = serve_engine(monkeypatch, str(d))
    assert (engine.speculative, engine.draft_tokens, engine.ngram_size) == ("ngram", 5, 4)
    engine = serve_engine(monkeypatch, str(d), "--speculative", "", "--draft-tokens", "7")
    assert (engine.speculative, engine.draft_tokens, engine.ngram_size) == ("", 7, 4)
    # a plain GGUF in the same directory layout but no artifact.json: flags and defaults only
    (d / ARTIFACT_JSON).unlink()
    assert serve_engine(monkeypatch, str(d)).speculative == ""


def test_cli_reports_invalid_recipes(tmp_path: Path) -> None:
    recipe = write(tmp_path / "r.yaml", "quantize: q9\nbogus: 1\n")
    result = CliRunner().invoke(app, ["optimize", "run", str(recipe)])
    assert result.exit_code == 2
    assert "unknown quantization type" in result.output and "bogus: unknown key" in result.output
    ok = write(tmp_path / "ok.yaml", "model: default\n")
    result = CliRunner().invoke(app, ["optimize", "run", str(ok), "--concurrency", "0"])
    assert result.exit_code == 2 and "benchmark.concurrency" in result.output


def test_merge_lora_paths_resolve_against_the_recipe_and_pin_the_adapters(tmp_path: Path) -> None:
    (tmp_path / "tone.gguf").write_bytes(b"GGUF not really")
    recipe = parse_recipe({"merge_lora": ["tone.gguf:0.5", "s3://b/x.gguf"]}, tmp_path)
    assert recipe.merge_lora == [f"{tmp_path / 'tone.gguf'}:0.5", "s3://b/x.gguf"]
    recipe.merge_lora = recipe.merge_lora[:1]
    [pinned] = recipe.artifact_recipe().merge_lora
    assert pinned["path"] == str(tmp_path / "tone.gguf") and pinned["scale"] == 0.5
    assert pinned["sha256"] == sha256_file(tmp_path / "tone.gguf") and pinned["name"] == "tone"
    # a recipe without a merge keeps the key it had before merging existed
    plain = Recipe(quantize="q8_0").to_dict()
    del plain["merge_lora"], plain["merge_type"]
    before = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()
    assert Recipe(quantize="q8_0").digest() == before
