"""Reading Ray Serve's details and judging placement (no Ray needed)."""

from __future__ import annotations

from typing import Any

from llmhost.endpoint.rayserve import status
from llmhost.endpoint.rayserve.status import DeploymentView, Placement, Replica

WAITING = (
    "Deployment 'b' in application 'e' has 1 replicas that have taken more than 30s to be scheduled. "
    'Resources required for each replica: {"CPU": 1.0}, total resources available: {"CPU": 0.5}.'
)


def details(**deployment: Any) -> dict[str, Any]:
    return {
        "applications": {
            "e": {
                "name": "e",
                "status": "RUNNING",
                "deployed_app_config": {
                    "name": "e",
                    "import_path": "x:y",
                    "deployments": [{"name": "a", "num_replicas": 2}],
                },
                "deployments": {
                    "b": {
                        "status": "HEALTHY",
                        "message": "",
                        "target_num_replicas": 2,
                        "required_resources": {"CPU": 1, "memory": 100},
                        "replicas": [
                            {
                                "replica_id": "r1",
                                "state": "RUNNING",
                                "node_id": "n1",
                                "node_ip": "10.0.0.1",
                                "pid": 11,
                                "actor_id": "x1",
                            },
                            {
                                "replica_id": "r2",
                                "state": "STARTING",
                                "node_id": None,
                                "node_ip": None,
                                "pid": None,
                                "actor_id": "x2",
                            },
                        ],
                        **deployment,
                    }
                },
            }
        }
    }


def test_a_deployment_as_the_ingress_sees_it() -> None:
    view = status.deployment_view(details(), "e", "b")
    assert view.known and view.status == "HEALTHY" and view.target == 2
    assert (view.running, view.starting) == (1, 1)
    assert view.replicas[0] == Replica("b-r1", "RUNNING", "n1", "10.0.0.1", 11, "x1")
    assert view.required == {"CPU": 1.0, "memory": 100.0}
    assert status.deployment_view(details(), "e", "nope") == DeploymentView()  # not (yet) known
    assert status.deployment_view({}, "e", "b").known is False


def test_scale_keeps_the_other_overrides() -> None:
    overrides = status.deployment_overrides(details(), "e")
    got = status.with_override(overrides, {"name": "b", "num_replicas": 3})
    assert got == [{"name": "a", "num_replicas": 2}, {"name": "b", "num_replicas": 3}]
    assert status.with_override(got, {"name": "a", "num_replicas": 1})[-1] == {"name": "a", "num_replicas": 1}


def waiting(**kw: Any) -> DeploymentView:
    return status.deployment_view(details(message=WAITING, **kw), "e", "b")


def test_a_copy_no_node_could_hold_is_refused_at_once() -> None:
    half = {"CPU": 0.5, "memory": 1000}
    why = Placement(60).verdict(waiting(), [half, half], {"CPU": 1.0, "memory": 2000}, now=0)
    assert why is not None and why.startswith("no node of the Ray cluster") and WAITING in why


def test_a_copy_the_cluster_lacks_room_for_is_given_up_after_the_patience() -> None:
    node = {"CPU": 1.0, "memory": 1000}
    placement, nodes, free = Placement(10), [node, node], {"CPU": 0.5, "memory": 2000}
    assert placement.verdict(waiting(), nodes, free, now=100) is None
    assert placement.verdict(waiting(), nodes, free, now=109) is None
    why = placement.verdict(waiting(), nodes, free, now=110)
    assert why is not None and "short of CPU for one more copy for 10 s" in why and WAITING in why


def test_a_copy_waiting_only_for_its_worker_is_not_refused() -> None:
    placement, nodes = Placement(10), [{"CPU": 1.0, "memory": 1000}]
    assert placement.verdict(waiting(), nodes, nodes[0], now=0) is None  # room enough: a slow start
    # Ray's message outlives the copy it was about: no copy waiting, nothing to judge
    assert placement.verdict(waiting(replicas=[]), nodes, {}, now=100) is None
    assert placement.since is None
