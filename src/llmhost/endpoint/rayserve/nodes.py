"""Models reachable from every node: what `up --ray` checks before deploying.

`default` assembles on each node and s3:// references download into each node's cache when a copy
starts there; a local path must exist on every node, so it is made absolute (as seen where `up` ran)
and looked up on each alive node by a task pinned there.
"""

from __future__ import annotations

from pathlib import Path

from llmhost.endpoint.spec import ComponentSpec, EndpointSpec
from llmhost.store import DEFAULT_MODEL_REF


def is_local(ref: str) -> bool:
    return ref != DEFAULT_MODEL_REF and not ref.startswith("s3://")


def absolute_models(spec: EndpointSpec) -> EndpointSpec:
    """Local model paths made absolute: a copy runs in Ray's working directory, not ours."""
    comps = [
        c.model_copy(update={"model": str(Path(c.model).expanduser().resolve())}) if is_local(c.model) else c
        for c in spec.components
    ]
    return spec.model_copy(update={"components": comps})


def chat_templates(spec: EndpointSpec) -> dict[str, str]:
    """Each component's chat template file, read here: its text travels to the copies."""
    return {c.name: Path(c.engine.chat_template).expanduser().read_text()
            for c in spec.components if c.engine.chat_template}  # fmt: skip


def resources() -> tuple[list[dict[str, float]], dict[str, float]]:
    """Each alive node's total resources, and the cluster's free ones (what placement is judged on)."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    totals = [{str(k): float(v) for k, v in n.get("Resources", {}).items()} for n in alive]
    return totals, {str(k): float(v) for k, v in ray.available_resources().items()}


def _missing_here(refs: list[str]) -> list[tuple[str, str]]:
    """On one node: the references that resolve to no model there, with why."""
    from llmhost.store import resolve_model

    missing = []
    for ref in refs:
        try:
            resolve_model(ref)
        except FileNotFoundError as exc:
            missing.append((ref, str(exc)))
    return missing


def missing_models(components: list[ComponentSpec]) -> list[str]:
    """What is missing where: one line per node and component whose local model is not there."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    refs = sorted({c.model for c in components if is_local(c.model)})
    if not refs:
        return []
    probe = ray.remote(num_cpus=0)(_missing_here)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    pending = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
               .remote(refs) for n in nodes]  # fmt: skip
    problems = []
    for node, missing in zip(nodes, ray.get(pending, timeout=120), strict=True):
        for ref, why in missing:
            users = ", ".join(c.name for c in components if c.model == ref)
            where = f"node {node['NodeID']} ({node['NodeManagerAddress']})"
            problems.append(f"{where}: component(s) {users}: {why}")
    return problems
