"""The endpoint file in Ray Serve's terms (no Ray needed)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from llmhost.endpoint.rayserve import options
from llmhost.endpoint.rayserve.options import AppArgs, RayTiming, component_options, scale_override
from llmhost.endpoint.spec import ComponentSpec, parse_endpoint
from llmhost.settings.serve import default_value

TIMING = RayTiming(
    health_check_period_s=1,
    health_check_timeout_s=7,
    drain_timeout_s=30,
    metrics_interval_s=0.5,
    look_back_period_s=4,
)


def spec(**kw: object) -> ComponentSpec:
    return ComponentSpec.model_validate({"name": "c", **kw})


def test_copies_resources_and_health_map_to_deployment_options() -> None:
    engine = {"max_concurrent": 4, "max_queue": 10}
    c = spec(copies=3, resources={"num_cpus": 2, "memory_mb": 1500}, engine=engine)
    got = component_options(c, TIMING, {}, "debug")
    assert got == {
        "name": "c",
        "num_replicas": 3,
        "autoscaling_config": None,
        "ray_actor_options": {"num_cpus": 2.0, "memory": 1500 * 2**20},
        "max_ongoing_requests": 14,
        "health_check_period_s": 1,
        "health_check_timeout_s": 7,
        "graceful_shutdown_timeout_s": 30,
        "graceful_shutdown_wait_loop_s": 1.0,
        "logging_config": {"log_level": "DEBUG"},
    }


def test_autoscaling_maps_to_ray_serves_autoscaling_config() -> None:
    got = component_options(
        spec(
            resources={"num_cpus": 0.5},
            autoscaling={
                "min_copies": 0,
                "max_copies": 3,
                "target_concurrent_per_copy": 2.5,
                "scale_in_cooldown_s": 20,
                "scale_out_cooldown_s": 5,
            },
        ),
        TIMING,
        {},
        "info",
    )
    assert got["num_replicas"] is None
    assert got["autoscaling_config"] == {
        "min_replicas": 0,
        "max_replicas": 3,
        "initial_replicas": 0,
        "target_ongoing_requests": 2.5,
        "upscale_delay_s": 5,
        "downscale_delay_s": 20,
        "metrics_interval_s": 0.5,
        "look_back_period_s": 4,
    }
    assert got["ray_actor_options"]["num_cpus"] == 0.5
    assert got["max_ongoing_requests"] == default_value("max_concurrent", {}) + default_value("max_queue", {})


def test_scale_pins_copies_and_drops_autoscaling() -> None:
    assert scale_override(spec(), 2) == {"name": "c", "num_replicas": 2, "autoscaling_config": None}


def test_the_ingress_runs_on_the_head_node_and_takes_no_cpu() -> None:
    got = options.ingress_options(TIMING, "warning")
    assert got["num_replicas"] == 1 and got["ray_actor_options"]["num_cpus"] == 0
    assert got["logging_config"] == {"log_level": "WARNING"}
    assert got["ray_actor_options"]["resources"] == {options.HEAD_NODE_RESOURCE: 0.001}
    # the endpoint file's router.num_cpus: CPUs Ray reserves for the ingress, so no copy takes them
    assert options.ingress_options(TIMING, "warning", 1)["ray_actor_options"]["num_cpus"] == 1


def test_app_config_names_the_builder_with_the_file_as_args() -> None:
    ep = parse_endpoint({"name": "e", "components": [{"name": "c"}]})
    args = AppArgs(
        ep.model_dump(), {}, asdict(TIMING), "127.0.0.1:8265", [], {"MAX_TOTAL_TOKENS": "8192"}, "info"
    )
    got = options.app_config(ep, args, [{"name": "c", "num_replicas": 2}])
    assert got["name"] == "e" and got["import_path"] == "llmhost.endpoint.rayserve.app:build"
    assert got["args"]["endpoint"]["components"][0]["name"] == "c" and got["route_prefix"] == "/"
    assert AppArgs(**got["args"]) == args  # what the builder rebuilds from the config


def test_the_ingress_name_is_reserved_and_timing_validated() -> None:
    with pytest.raises(ValueError, match="taken by the Ray endpoint's ingress"):
        options.check_names(parse_endpoint({"name": "e", "components": [{"name": "ingress"}]}))
    with pytest.raises(ValueError, match="look_back_period_s must be > 0"):
        RayTiming(look_back_period_s=0)


def test_prefix_routing_names_llmhosts_request_router() -> None:
    from ray.serve.config import RequestRouterConfig

    assert options.router_options(spec()) == {}  # least outstanding: Ray Serve's own router
    got = options.router_options(spec(routing={"policy": "prefix", "block_chars": 128, "load_factor": 0.5}))
    config = RequestRouterConfig(**got["request_router_config"])  # Ray accepts it, and imports the class
    assert config.request_router_kwargs == {"component": "c", "block_chars": 128, "load_factor": 0.5}
    assert config.get_request_router_class().__name__ == "PrefixRequestRouter"
