"""What `up --ray` checks on every node before deploying (no Ray cluster needed): local models and
draft models made absolute and named by who uses them, a node dying during the check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmhost.endpoint.rayserve import nodes
from llmhost.endpoint.spec import SpecError, parse_endpoint

NODES = [{"NodeID": f"n{i}", "NodeManagerAddress": f"10.0.0.{i}"} for i in (1, 2)]


def endpoint(*components: dict[str, Any]) -> Any:
    return parse_endpoint({"name": "e", "components": list(components)})


def test_local_models_draft_models_and_adapters_are_made_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = nodes.absolute_models(
        endpoint(
            {
                "name": "a",
                "model": "m.gguf",
                "engine": {"draft_model": "drafts/d.gguf", "mmproj": "p/mmproj.gguf"},
                "adapters": [
                    {"name": "l", "path": "loras/l.gguf"},
                    {"name": "s", "path": "s3://bucket/s.gguf"},
                ],
            },
            {"name": "b", "model": "s3://bucket/m.gguf", "engine": {"draft_model": "s3://bucket/d.gguf"}},
            {"name": "c"},
            {"name": "k", "base": "c", "adapter": {"path": "k.gguf"}},
            {
                "name": "h",
                "model": "hf://acme/v-GGUF:Q8_0",
                "engine": {"mmproj": "hf://acme/v-GGUF/mmproj.gguf"},
            },
            {"name": "t", "model": "s3://bucket/v/", "engine": {"mmproj": "s3://bucket/mmproj.gguf"}},
        )
    )
    a, b, c, h, t = spec.components
    assert [x.path for x in a.adapters] == [str(tmp_path / "loras/l.gguf"), "s3://bucket/s.gguf"]
    assert [x.path for x in c.adapters] == [str(tmp_path / "k.gguf")]  # an adapter component's too
    assert (a.model, a.engine.draft_model) == (str(tmp_path / "m.gguf"), str(tmp_path / "drafts/d.gguf"))
    assert (b.model, b.engine.draft_model) == ("s3://bucket/m.gguf", "s3://bucket/d.gguf")
    assert c.model == "default" and c.engine.draft_model is None
    assert a.engine.mmproj == str(tmp_path / "p/mmproj.gguf")
    # resolved on each node into its own cache (a projector found with the hf:// model there too)
    assert (h.model, h.engine.mmproj) == ("hf://acme/v-GGUF:Q8_0", "hf://acme/v-GGUF/mmproj.gguf")
    assert (t.model, t.engine.mmproj) == ("s3://bucket/v/", "s3://bucket/mmproj.gguf")
    assert nodes.local_refs(spec.components) == {
        str(tmp_path / "m.gguf"): ["component a"],
        str(tmp_path / "drafts/d.gguf"): ["component a's draft_model"],
        str(tmp_path / "p/mmproj.gguf"): ["component a's mmproj"],
    }


def test_a_node_that_dies_during_the_check_is_named_not_a_traceback() -> None:
    # here: Ray reads its environment when imported, and the integration tests set it first
    from ray.exceptions import GetTimeoutError, NodeDiedError

    users = {"/m.gguf": ["component a"], "/d.gguf": ["component a's draft_model"]}
    answers: dict[str, Any] = {
        "on-n1": [("/d.gguf", "model reference '/d.gguf' is neither a .gguf file, ...")],
        "on-n2": NodeDiedError("node n2 died\nits raylet's log says more"),
    }

    def get(ref: str, timeout: float) -> Any:
        assert 0 < timeout <= 120
        if isinstance(answers[ref], Exception):
            raise answers[ref]
        return answers[ref]

    problems = nodes.collect(NODES, ["on-n1", "on-n2"], users, get, timeout_s=120)
    assert problems == [
        "node n1 (10.0.0.1): component a's draft_model: model reference '/d.gguf' is neither a .gguf "
        "file, ...",
        "node n2 (10.0.0.2): models not checked, the node did not answer: NodeDiedError: node n2 died",
    ]
    answers["on-n2"] = GetTimeoutError("Get timed out: some object(s) not ready.")
    problems = nodes.collect(NODES, ["on-n1", "on-n2"], users, get, timeout_s=120)
    assert problems[1].endswith("did not answer: GetTimeoutError: Get timed out: some object(s) not ready.")


def test_chat_templates_are_read_where_up_runs(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ x }}")
    spec = endpoint({"name": "a", "engine": {"chat_template": str(template)}}, {"name": "b"})
    assert nodes.chat_templates(spec) == {"a": "{{ x }}"}
    missing = endpoint({"name": "a", "engine": {"chat_template": str(tmp_path / "absent.jinja")}})
    where = r"components\(a\)\.engine\.chat_template: .*absent\.jinja: cannot read"
    with pytest.raises(SpecError, match=where):
        nodes.chat_templates(missing)
