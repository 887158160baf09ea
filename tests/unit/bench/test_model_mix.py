"""`--model a,b,c` (and `--component a,b` for /invocations): requests name each in turn, and a mix the
API cannot carry is refused naming the flag."""

from __future__ import annotations

from typing import Any

import pytest

from llmhost.bench.config import BenchConfig
from llmhost.bench.figures.metrics import RequestRecord, by_model
from llmhost.bench.load.targets import Target

URL = "http://127.0.0.1:1"


def test_a_mix_names_each_model_in_turn() -> None:
    mix = Target("chat", model="base, sql,poet").mix()
    assert [(name, t.model) for name, t in mix] == [("base", "base"), ("sql", "sql"), ("poet", "poet")]
    assert mix[1][1].body("hi", 4)["model"] == "sql"  # type: ignore[typeddict-item]
    headers = [
        t.headers()["X-Amzn-SageMaker-Inference-Component"]
        for _, t in Target("sagemaker", component="a,b").mix()
    ]
    assert headers == ["a", "b"]
    assert Target("openai", model="one").mix() == [(None, Target("openai", model="one"))]


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"model": "a,,b"}, "--model: comma-separated names, none empty"),
        ({"model": "a,b", "api": "tgi"}, "--model with several names does not apply to --api tgi"),
        ({"component": "a,b", "api": "openai"}, "--component with several names does not apply"),
        ({"model": "a,b", "workload": "conversations"}, "applies to the prompts workload"),
    ],
)
def test_a_mix_the_api_cannot_carry_is_refused(given: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        BenchConfig(url=URL, **given).validate()


def test_figures_by_model_only_for_a_mix() -> None:
    def rec(model: str | None, ok: bool) -> RequestRecord:
        r = RequestRecord("c", "c=1", 0, 0.0, False, ok=ok, model=model, output_tokens=4 if ok else 0)
        r.ttft_s, r.e2e_s = (0.1, 0.5) if ok else (None, 1.0)
        return r

    assert by_model([rec(None, True), rec(None, True)], 1.0) == {}
    figures = by_model([rec("a", True), rec("b", True), rec("b", False)], 2.0)
    assert figures["a"]["requests"] == 1 and figures["b"]["requests"] == 2 and figures["b"]["successes"] == 1
    assert figures["b"]["output_tokens_per_s"] == 2.0 and figures["a"]["ttft_s_p50"] == 0.1
