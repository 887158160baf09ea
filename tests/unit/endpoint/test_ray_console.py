"""The Ray endpoint's console source (no Ray needed): readings from the ingress's counters and the copies'
pushes becoming CloudWatch-named points, the cluster's figures, the overview's components and copies as
Ray Serve reports them, and the admin rules the page follows."""

from __future__ import annotations

from prometheus_client import generate_latest

from llmhost.console.readings import ComponentReading
from llmhost.console.sampler import Sampler
from llmhost.console.timeseries import SeriesStore
from llmhost.endpoint.console import EndpointConsole
from llmhost.endpoint.rayserve import status
from llmhost.endpoint.rayserve.console import (
    SCALE_TO_ZERO,
    ClusterFigures,
    admin_block,
    component_block,
    host,
    replica_row,
)
from llmhost.endpoint.rayserve.metrics import CopyMetrics, Pushed
from llmhost.endpoint.rayserve.relay import RayComponent
from llmhost.endpoint.spec import ComponentSpec
from llmhost.server.metrics import ServerMetrics
from tests.unit.endpoint.ray_fakes import ray_backend


def copy_text(tokens: int) -> str:
    """A copy's /metrics: its server's registry rendered, and its engine's gauges (read from the engine)."""
    m = ServerMetrics()
    m.generation_tokens.inc(tokens)
    gauges = (
        "# TYPE llmhost_num_requests_running gauge\nllmhost_num_requests_running 1\n"
        "# TYPE llmhost_num_requests_waiting gauge\nllmhost_num_requests_waiting 2\n"
    )
    return generate_latest(m.registry).decode() + gauges


def component(name: str, *copies: tuple[str, str]) -> RayComponent:
    spec = ComponentSpec.model_validate({"name": name, "resources": {"num_cpus": 0.5, "memory_mb": 1000}})
    comp = RayComponent(spec, None)
    replicas = tuple(
        status.Replica(copy, state, "n1", "10.0.0.1", 100 + i, "actor", 1000.0)
        for i, (copy, state) in enumerate(copies)
    )
    comp.view = status.DeploymentView(True, "HEALTHY", "", len(copies), replicas)
    return comp


async def test_readings_become_cloudwatch_named_points() -> None:
    a = component("a", ("a-1", "RUNNING"), ("a-2", "STARTING"))
    pushes = CopyMetrics()
    pushes.report("a", "a-1", copy_text(10), cpu_s=1.0, rss_mb=250.0)
    clock = iter([100.0, 102.0])
    store = SeriesStore(period_s=2.0)
    sampler = Sampler(store, lambda: _read({"a": a}, pushes), clock=lambda: next(clock))
    await sampler.tick()  # the baseline
    a.requests.update({200: 3, 429: 1, 503: 1})
    a.no_capacity, a.timed, a.latency_s, a.model_latency_s = 1, 3, 0.6, 0.3
    pushes.report("a", "a-1", copy_text(30), cpu_s=1.5, rss_mb=500.0)
    await sampler.tick()
    (point,) = store.points("a")
    figures = store.window("a", 60, 102.0)
    assert point.copies == 1  # one RUNNING copy of two
    assert figures["Invocations"] == 5 and figures["Invocation4XXErrors"] == 1
    assert figures["Invocation5XXErrors"] == 1 and figures["NoCapacityInvocationFailures"] == 1
    assert figures["ModelLatency"] == 100 and figures["OverheadLatency"] == 100  # ms per timed answer
    assert figures["OutputTokensPerSecond"] == 10  # 20 tokens in 2 s
    assert figures["CPUUtilizationNormalized"] == 50  # 0.5 CPU s over 2 s of half a CPU
    assert figures["MemoryUtilizationNormalized"] == 50  # 500 MB of 1000 reserved (the copy pushing)
    assert figures["RequestsRunning"] == 1 and figures["RequestsWaiting"] == 2


async def _read(components: dict[str, RayComponent], pushes: CopyMetrics) -> dict[str, ComponentReading]:
    return await EndpointConsole(ray_backend(list(components.values()), pushes), auth=False).read()


async def test_a_copy_that_has_not_pushed_or_pushed_garbage_has_no_engine_figures() -> None:
    a = component("a", ("a-1", "RUNNING"), ("a-2", "RUNNING"))
    pushes = CopyMetrics()
    pushes.report("a", "a-2", "not the exposition format {", cpu_s=1.0, rss_mb=10.0)
    (first, second) = (await _read({"a": a}, pushes))["a"].copies
    assert first.key == "a-1" and first.engine is None and first.cpu_s is None and first.rss_mb is None
    assert second.engine is None and second.cpu_s == 1.0 and second.cpus_reserved == 0.5


def test_host_figures_are_the_clusters_logical_resources() -> None:
    gib = 2.0**30
    cluster = ClusterFigures(
        [{"node_id": "n1", "ip": "10.0.0.1", "cpus": 2.0, "memory_mb": 4096}],
        {"CPU": 2.0, "memory": 4 * gib},
        {"CPU": 0.5, "memory": 1 * gib},
    )
    h = host(cluster, 0.25)
    assert (h["cpus"], h["cpus_reserved"], h["cpus_free"]) == (2, 1.5, 0.5)
    assert (h["memory_reservable_mb"], h["memory_reserved_mb"], h["memory_free_mb"]) == (4096, 3072, 1024)
    assert h["copy_cpus"] == [] and h["router_num_cpus"] == 0.25 and h["nodes"][0]["ip"] == "10.0.0.1"
    assert host(ClusterFigures(), 0)["cpus"] == 0  # Ray not answering yet: nothing, not a guess


def test_copies_in_the_consoles_words_with_what_ray_does_not_know_left_empty() -> None:
    a = component("a", ("a-1", "RUNNING"), ("a-2", "RECOVERING"))
    running, recovering = a.view.replicas
    row = replica_row(a, running, Pushed("a", "", 0.0, 1.0, 123.45), now=1060.0)
    assert row["state"] == "ready" and row["ray_state"] == "RUNNING" and row["ready_for_s"] == 60.0
    assert row["rss_mb"] == 123.5 and row["memory_mb"] == 1000 and row["cpu_share"] == 0.5
    assert row["restarts"] is None and row["cpus"] is None and row["outstanding"] is None
    assert replica_row(a, recovering, None, 1060.0)["state"] == "restarting"
    odd = status.Replica("a-3", "SOMETHING_NEW", "n", "ip", None, "x")
    assert replica_row(a, odd, None, 0.0)["state"] == "something_new"  # Ray's word, never dropped


def test_a_component_carries_rays_decisions_and_stopped_copies() -> None:
    a = component("a", ("a-1", "RUNNING"))
    dead = status.Replica.of("a", {"replica_id": "old", "state": "STOPPED", "pid": 7, "start_time_s": 5})
    decided = {"timestamp_s": 50.0, "reason": "load went up", "prev_num_replicas": 1, "curr_num_replicas": 2}
    a.view = status.DeploymentView(True, "UPSCALING", "", 2, a.view.replicas, {}, (dead,), (decided,))
    a.waiting = 3
    block = component_block(a, {"name": "a", "copies": 2, "ready": 1}, {}, now=60.0)
    assert block["decisions"] == [{"at": 50.0, "copies": 1, "desired": 2, "reason": "load went up"}]
    assert block["stopped"] == [
        {"copy": "a-old", "ray_state": "STOPPED", "node_id": "", "pid": 7, "started_at": 5.0}
    ]
    assert block["waiting"] == 3 and block["copies"] == 2 and block["replicas"][0]["copy"] == "a-1"


def test_deployment_view_reads_rays_decisions_and_dead_replicas() -> None:
    details = {
        "applications": {
            "e": {
                "deployments": {
                    "a": {
                        "status": "HEALTHY",
                        "target_num_replicas": 1,
                        "replicas": [{"replica_id": "r1", "state": "RUNNING", "start_time_s": 12.5}],
                        "recent_dead_replicas": [{"replica_id": "r0", "state": "STOPPED"}],
                        "autoscaling_detail": {
                            "decisions": [{"timestamp_s": 1.0, "reason": "x"}, "not a decision"]
                        },
                    }
                }
            }
        }
    }
    v = status.deployment_view(details, "e", "a")
    assert v.replicas[0].started_at == 12.5 and [r.copy for r in v.dead] == ["a-r0"]
    assert v.decisions == ({"timestamp_s": 1.0, "reason": "x"},)
    assert status.deployment_view({"applications": {"e": {"deployments": {"a": {}}}}}, "e", "a").dead == ()


def test_the_admin_block_says_what_ray_allows() -> None:
    local = admin_block(True)
    assert local["allowed"] and local["why_not"] is None and local["down"] and local["scale"]
    assert not local["add_remove"] and "change the file" in local["add_remove_why"]
    assert not local["scale_to_zero"] and local["scale_to_zero_why"] == SCALE_TO_ZERO
    remote = admin_block(False)
    assert not remote["allowed"] and remote["why_not"] == "the admin API answers local clients only"
