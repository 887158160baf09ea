"""The Ray Serve application builder, named by the deploy config's import path: every node imports it
from its own llmhost installation, and the config's args are the endpoint file."""

from __future__ import annotations

from typing import Any

from llmhost.endpoint.rayserve.options import (
    AppArgs,
    RayTiming,
    component_options,
    ingress_options,
    push_period_s,
)
from llmhost.endpoint.spec import EndpointSpec


def build(args: dict[str, Any]) -> Any:
    """One deployment per component (each replica an llmhost engine + server), and the ingress."""
    from ray import serve

    from llmhost.endpoint.rayserve.ingress import Ingress
    from llmhost.endpoint.rayserve.server import ComponentServer

    app_args = AppArgs(**args)
    spec = EndpointSpec.model_validate(app_args.endpoint)
    timing = RayTiming(**app_args.timing)
    env, level = app_args.env, app_args.log_level
    push_s = push_period_s(app_args.console_period_s)
    handles = {
        c.name: serve.deployment(ComponentServer, **component_options(c, timing, env, level)).bind(
            c.model_dump(), app_args.chat_templates.get(c.name), env, level, push_s
        )
        for c in spec.components
    }
    options = ingress_options(timing, level, spec.router.num_cpus)
    ingress = serve.deployment(serve.ingress()(Ingress), **options)
    return ingress.bind(handles, args)
