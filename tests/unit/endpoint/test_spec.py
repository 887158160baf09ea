"""The endpoint file: what is accepted, and how each mistake is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmhost.endpoint.spec import SpecError, load_endpoint, parse_components, parse_endpoint

DESIGN_EXAMPLE = """
name: chat
instance: {type: c7g.8xlarge, price_per_hour: 1.16}   # for cost reports
components:
  - name: gemma-q4
    model: default            # default | ./model.gguf | s3://bucket/prefix/
    copies: 2
    resources: {num_cpus: 1, memory_mb: 1024, max_memory_mb: 2048}
    engine: {max_input_tokens: 2048, max_total_tokens: 4096, max_batch_tokens: 512, max_concurrent: 8}
    autoscaling: {min_copies: 1, max_copies: 4, target_concurrent_per_copy: 4, scale_in_cooldown_s: 60}
    startup_health_check_timeout_s: 600
"""


def comp(**over: Any) -> dict[str, Any]:
    return {"name": "a", "model": "default", **over}


def endpoint(*components: dict[str, Any]) -> dict[str, Any]:
    return {"name": "ep", "components": list(components) or [comp()]}


def error_of(data: Any) -> str:
    with pytest.raises(SpecError) as info:
        parse_endpoint(data, "ep.yaml")
    return str(info.value)


def test_design_example_loads(tmp_path: Path) -> None:
    f = tmp_path / "ep.yaml"
    f.write_text(DESIGN_EXAMPLE)
    spec = load_endpoint(f)
    [c] = spec.components
    assert spec.instance.price_per_hour == 1.16
    assert c.initial_copies == 2 and c.resources.threads == 1
    assert c.engine.serve_args() == [  # in the settings spec's order
        "--max-concurrent",
        "8",
        "--max-input-tokens",
        "2048",
        "--max-total-tokens",
        "4096",
        "--max-batch-tokens",
        "512",
    ]
    assert c.autoscaling is not None and c.autoscaling.max_copies == 4


def test_speculative_settings_reach_the_copies() -> None:
    engine = {"speculative": "ngram", "draft_tokens": 8, "ngram_size": 4}
    [c] = parse_endpoint(endpoint(comp(engine=engine))).components
    assert c.engine.serve_args() == ["--speculative", "ngram", "--draft-tokens", "8", "--ngram-size", "4"]
    draft = parse_endpoint(endpoint(comp(engine={"speculative": "draft", "draft_model": "s3://b/d.gguf"})))
    assert draft.components[0].engine.serve_args() == [
        "--speculative",
        "draft",
        "--draft-model",
        "s3://b/d.gguf",
    ]


def test_defaults_and_fractional_cpus() -> None:
    spec = parse_endpoint(endpoint(comp(resources={"num_cpus": 0.5})))
    [c] = spec.components
    assert c.initial_copies == 1 and c.resources.num_cpus == 0.5 and c.resources.threads == 1
    auto = parse_endpoint(endpoint(comp(autoscaling={"min_copies": 0, "max_copies": 2}))).components[0]
    assert auto.initial_copies == 0
    assert parse_endpoint(endpoint(comp(resources={"num_cpus": 2}))).components[0].resources.threads == 2


def test_unknown_key_names_its_path() -> None:
    msg = error_of(endpoint(comp(resources={"num_cpus": 1, "num_gpus": 1})))
    assert "ep.yaml: components[0](a).resources.num_gpus: unknown key" in msg
    assert "colour: unknown key" in error_of({**endpoint(), "colour": "red"})


@pytest.mark.parametrize(
    ("component", "expected"),
    [
        (comp(resources={"num_cpus": 1.5}), "num_cpus above 1 must be a whole number"),
        (comp(resources={"num_cpus": 0}), "resources.num_cpus: Input should be greater than 0"),
        (
            comp(resources={"memory_mb": 2048, "max_memory_mb": 1024}),
            "max_memory_mb (1024) is below memory_mb",
        ),
        (comp(copies=5, autoscaling={"min_copies": 1, "max_copies": 4}), "copies (5) must lie between"),
        (comp(autoscaling={"min_copies": 3, "max_copies": 2}), "min_copies (3) exceeds max_copies (2)"),
        (comp(copies=0), "copies: 0 needs autoscaling"),
        (comp(engine={"max_input_tokens": 512, "max_total_tokens": 512}), "must be below max_total_tokens"),
        (comp(engine={"speculative": "draft"}), "speculative: draft needs a draft_model"),
        (comp(engine={"speculative": "ngram", "draft_model": "d.gguf"}), "draft_model is for speculative"),
        (comp(engine={"speculative": "eagle"}), "speculative: Input should be 'ngram' or 'draft'"),
        (comp(engine={"cache_type_v": "q9"}), "cache_type_v: Input should be 'f16', 'bf16'"),
        (comp(name="no spaces"), "components[0](no spaces).name: String should match pattern"),
        (comp(autoscaling={"target_concurrent_per_copy": 0}), "target_concurrent_per_copy"),
        (comp(startup_health_check_timeout_s=-1), "startup_health_check_timeout_s"),
        (comp(engine={"ngram_size": 1}), "ngram_size: Input should be greater than or equal to 2"),
        (comp(engine={"pooling": "cls"}), "engine.pooling applies to embeddings: true only"),
        (comp(engine={"prompt_cache_mb": 1024}), "prompt_cache_mb (1024) must be below resources.memory_mb"),
    ],
)
def test_impossible_values_are_refused(component: dict[str, Any], expected: str) -> None:
    assert expected in error_of(endpoint(component))


def test_s3_models_are_accepted() -> None:
    spec = parse_endpoint(
        endpoint(comp(model="s3://bucket/prefix/"), comp(name="b", model="s3://b/m.tar.gz"))
    )
    assert [c.model for c in spec.components] == ["s3://bucket/prefix/", "s3://b/m.tar.gz"]


def test_adapters_reach_the_copies_as_lora_options_and_name_one_place() -> None:
    adapters = [
        {"name": "sql", "path": "s3://b/sql.gguf"},
        {"name": "poet", "path": "poet.gguf", "scale": 0.5},
    ]
    [c] = parse_endpoint(endpoint(comp(adapters=adapters))).components
    assert c.serve_options()["lora"] == ["sql=s3://b/sql.gguf:1.0", "poet=poet.gguf:0.5"]
    clash = endpoint(comp(), comp(name="b", adapters=[{"name": "a", "path": "x"}]))
    assert "the name of a component" in error_of(clash)
    twice = endpoint(comp(adapters=adapters[:1]), comp(name="b", adapters=adapters[:1]))
    assert "adapter 'sql' of component 'b': the name of an adapter of 'a'" in error_of(twice)
    assert "applies to text generation" in error_of(endpoint(comp(embeddings=True, adapters=adapters)))
    infinite = endpoint(comp(adapters=[{"name": "x", "path": "p", "scale": "inf"}]))
    assert "scale must be a finite number" in error_of(infinite)


def test_endpoint_level_errors() -> None:
    assert "component name 'a' appears twice" in error_of(endpoint(comp(), comp()))
    assert "components: List should have at least 1 item" in error_of({"name": "ep", "components": []})
    assert "name: required key is missing" in error_of({"components": [comp()]})
    assert "expected a mapping" in error_of(["not", "a", "mapping"])


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_endpoint(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_endpoint(bad)


def test_component_files_for_add() -> None:
    assert [c.name for c in parse_components(comp(name="x"))] == ["x"]
    assert [c.name for c in parse_components({"components": [comp(name="x"), comp(name="y")]})] == ["x", "y"]
    with pytest.raises(SpecError, match=r"components\[0\]\(x\).copies: unknown key|Input should be"):
        parse_components({"components": [comp(name="x", copies="many")]})
    with pytest.raises(SpecError, match="bogus: unknown key"):
        parse_components(comp(bogus=1))


def test_an_adapter_component_lives_on_its_base_and_is_checked_as_sagemaker_checks_it() -> None:
    sql = {"name": "sql", "base": "a", "adapter": {"path": "s3://b/sql.gguf", "scale": 0.5}}
    [base] = parse_endpoint(endpoint(comp(adapters=[{"name": "poet", "path": "p.gguf"}]), sql)).components
    assert base.serve_options()["lora"] == ["poet=p.gguf:1.0", "sql=s3://b/sql.gguf:0.5"]
    assert "no component named 'b'" in error_of(endpoint(comp(), {**sql, "base": "b"}))
    on_adapter = {"name": "x", "base": "sql", "adapter": {"path": "x.gguf"}}
    assert "its base 'sql' is an adapter component itself" in error_of(endpoint(comp(), sql, on_adapter))
    assert "resources cannot be set (they are the base's)" in error_of(
        endpoint(comp(), {**sql, "resources": {"num_cpus": 2}})
    )
    assert "copies, model cannot be set" in error_of(endpoint(comp(), {**sql, "model": "x", "copies": 2}))
    assert "gives both `base`" in error_of(endpoint(comp(), {"name": "sql", "base": "a"}))
    assert "component name 'sql' appears twice" in error_of(endpoint(comp(), sql, sql))
    taken = endpoint(comp(adapters=[{"name": "sql", "path": "q"}]), sql)
    assert "adapter 'sql' of component 'a': the name of a component" in error_of(taken)
    assert "serves embeddings" in error_of(endpoint(comp(embeddings=True), sql))
    assert "scale must be a finite number" in error_of(
        endpoint(comp(), {**sql, "adapter": {"path": "p", "scale": "nan"}})
    )


@pytest.mark.parametrize(
    ("resources", "limit"),
    [
        ({"memory_mb": 600}, (600, "memory_mb")),  # the reservation is the limit when none is given
        ({"memory_mb": 600, "max_memory_mb": 900}, (900, "max_memory_mb")),
        ({}, (1024, "memory_mb")),
    ],
)
def test_a_copy_is_limited_to_max_memory_mb_else_its_reservation(
    resources: dict[str, int], limit: tuple[int, str]
) -> None:
    [c] = parse_endpoint(endpoint(comp(resources=resources)), "ep.yaml").components
    assert (c.resources.limit_mb, c.resources.limit_setting) == limit
