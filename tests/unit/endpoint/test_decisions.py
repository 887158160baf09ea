"""The autoscaler's decisions a component keeps for the console: changes and held-back changes, each
run of the same decision once, nothing while nothing has happened, the last 20."""

from __future__ import annotations

from pathlib import Path

from llmhost.endpoint.control.autoscaling import record_decision
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.spec import parse_endpoint
from llmhost.store import ResolvedModel


def component(tmp_path: Path) -> Component:
    spec = parse_endpoint({"name": "ep", "components": [{"name": "a", "copies": 1}]})
    return Component(spec.components[0], ResolvedModel(tmp_path / "m.gguf"))


def test_decisions_kept_once_per_run(tmp_path: Path) -> None:
    comp = component(tmp_path)
    record_decision(comp, 1, 1, "on target")
    assert list(comp.decisions) == []  # nothing has happened yet
    for _ in range(3):
        record_decision(comp, 1, 2, "3 concurrent > 2 x 1 copies")
    record_decision(comp, 2, 2, "scale-out cooldown")
    record_decision(comp, 2, 2, "scale-out cooldown")
    record_decision(comp, 2, 2, "on target")
    record_decision(comp, 2, 2, "on target")
    assert [(d["copies"], d["desired"], d["reason"]) for d in comp.decisions] == [
        (1, 2, "3 concurrent > 2 x 1 copies"),
        (2, 2, "scale-out cooldown"),
        (2, 2, "on target"),
    ]
    assert all(isinstance(d["at"], float) for d in comp.decisions)
    assert comp.status()["decisions"] == list(comp.decisions)


def test_only_the_last_twenty_are_kept(tmp_path: Path) -> None:
    comp = component(tmp_path)
    for i in range(25):
        record_decision(comp, i, i + 1, f"step {i}")
    assert len(comp.decisions) == 20 and comp.decisions[0]["reason"] == "step 5"
