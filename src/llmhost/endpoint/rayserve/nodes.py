"""Models reachable from every node: what `up --ray` checks before deploying.

`default` assembles on each node and s3:// and hf:// references (a model's, a projector's) download
into each node's cache when a copy starts there, passed on untouched; a local path (a component's model,
its engine's draft_model or mmproj) must exist on every node, so it is made absolute (as seen where `up`
ran) and looked up on each alive node by a task pinned there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmhost.endpoint.spec import ComponentSpec, EndpointSpec, SpecError
from llmhost.store import DEFAULT_MODEL_REF

CHECK_TIMEOUT_S = 120.0


def is_local(ref: str) -> bool:
    """A path (not `default`, s3:// or hf://, which every node resolves into its own cache)."""
    return ref != DEFAULT_MODEL_REF and "://" not in ref


def _absolute(ref: str) -> str:
    return str(Path(ref).expanduser().resolve()) if is_local(ref) else ref


def absolute_models(spec: EndpointSpec) -> EndpointSpec:
    """Local model, draft model, projector and LoRA adapter paths made absolute: a copy runs in Ray's
    working directory."""
    comps = []
    for c in spec.components:
        engine = c.engine
        if engine.draft_model:
            engine = engine.model_copy(update={"draft_model": _absolute(engine.draft_model)})
        if engine.mmproj:
            engine = engine.model_copy(update={"mmproj": _absolute(engine.mmproj)})
        adapters = [
            a if "://" in a.path else a.model_copy(update={"path": _absolute(a.path)}) for a in c.adapters
        ]
        update = {"model": _absolute(c.model), "engine": engine, "adapters": adapters}
        comps.append(c.model_copy(update=update))
    return spec.model_copy(update={"components": comps})


def local_refs(components: list[ComponentSpec]) -> dict[str, list[str]]:
    """Each local reference, with who uses it (`component a`, `component b's draft_model`)."""
    users: dict[str, list[str]] = {}
    for c in components:
        if is_local(c.model):
            users.setdefault(c.model, []).append(f"component {c.name}")
        if c.engine.draft_model and is_local(c.engine.draft_model):
            users.setdefault(c.engine.draft_model, []).append(f"component {c.name}'s draft_model")
        if c.engine.mmproj and is_local(c.engine.mmproj):
            users.setdefault(c.engine.mmproj, []).append(f"component {c.name}'s mmproj")
    return users


def chat_templates(spec: EndpointSpec) -> dict[str, str]:
    """Each component's chat template file, read here: its text travels to the copies."""
    texts = {}
    for c in spec.components:
        if c.engine.chat_template:
            path = Path(c.engine.chat_template).expanduser()
            try:
                texts[c.name] = path.read_text()
            except OSError as exc:
                raise SpecError(
                    f"components({c.name}).engine.chat_template: {path}: cannot read: {exc.strerror or exc}"
                ) from None
    return texts


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


def collect(
    nodes: list[dict[str, Any]],
    pending: list[Any],
    users: dict[str, list[str]],
    get: Callable[[Any, float], list[tuple[str, str]]],
    timeout_s: float,
) -> list[str]:
    """One line per node and reference missing there, or per node whose check did not answer (it
    died, or Ray could not run the check there)."""
    from ray.exceptions import RayError

    deadline = time.monotonic() + timeout_s
    problems = []
    for node, ref in zip(nodes, pending, strict=True):
        where = f"node {node['NodeID']} ({node['NodeManagerAddress']})"
        try:
            missing = get(ref, max(0.0, deadline - time.monotonic()))
        except RayError as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            problems.append(
                f"{where}: models not checked, the node did not answer: {type(exc).__name__}: {first}"
            )
            continue
        problems += [f"{where}: {', '.join(users[ref_])}: {why}" for ref_, why in missing]
    return problems


def missing_models(components: list[ComponentSpec]) -> list[str]:
    """What is missing where: one line per node and reference that is not there."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    users = local_refs(components)
    if not users:
        return []
    probe = ray.remote(num_cpus=0, max_retries=0)(_missing_here)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    pending = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
            sorted(users)
        )
        for n in nodes
    ]
    return collect(nodes, pending, users, lambda ref, timeout: ray.get(ref, timeout=timeout), CHECK_TIMEOUT_S)
