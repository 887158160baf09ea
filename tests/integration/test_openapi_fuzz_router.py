"""Schemathesis, led by the router's own /openapi.json, against a real endpoint router (`llmhost endpoint
up`, one component of the tiny model of `tiny_model`) with the token limits and API keys of
test_openapi_fuzz.py's `llmhost serve`: every operation, the checks of schemathesis_helpers.py, any
finding fails the test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CHAT_TEMPLATE
from tests.integration.endpoint_helpers import Endpoint, start_endpoint, stop_endpoint
from tests.integration.schemathesis_helpers import AUTH, CHECKS, KEY, schemathesis


# One copy holding a CPU whole and the router every other CPU: no further copy fits, so a generated
# component or scale-up the admin API accepts is refused for capacity (409) instead of starting copies.
# The copy's limits as test_openapi_fuzz.py's `llmhost serve`.
def endpoint_file(model: Path) -> str:
    cpus = len(os.sched_getaffinity(0))
    return f"""
name: fuzz
router: {{num_cpus: {cpus - 1}}}
components:
  - name: only
    model: {model}
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {{max_input_tokens: 16, max_total_tokens: 20, max_batch_tokens: 32, max_concurrent: 2,
              chat_template: {CHAT_TEMPLATE}}}
    startup_health_check_timeout_s: 120
"""


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Endpoint]:
    # the helpers' quick hang detection (1 s) is for the fault tests; here a copy starved of CPU on a busy
    # machine must not be taken for hung and killed under a request (a 502 that is no finding)
    health = ("--health-interval", "1", "--health-timeout", "15", "--health-misses", "3")
    ep = start_endpoint(
        tmp_path_factory.mktemp("openapi-endpoint"),
        endpoint_file(tiny_model),
        args=("--api-key", KEY, *health),
    )
    yield ep
    stop_endpoint(ep)


# The relayed operations are the copies' own (the same models, the same answers) and the serve's coverage
# run above walks their schema boundaries; here fuzzing, positive and negative, checks what the router
# adds: routing, relaying answers and streams unchanged, its own refusals. The coverage phase walks the
# router's own operations. The admin operations that change the endpoint run last, /admin/down (which
# stops it) alone at the end: a component they added would make every request naming none a 400.
CHANGES = "^/admin/(scale|components|down)"
OWN = "^/(ping|health|metrics|v1/models|admin/(status|scale|components)|console/api/)"
ROUTER_FUZZ_EXAMPLES = 2


def test_router_generated_requests_conform(endpoint: Endpoint, tmp_path: Path) -> None:
    schemathesis(
        endpoint.url,
        tmp_path,
        "--phases",
        "examples,fuzzing",
        "--max-examples",
        str(ROUTER_FUZZ_EXAMPLES),
        *AUTH,
        "--exclude-path-regex",
        CHANGES,
        checks=[*CHECKS, "ignored_auth"],
    )


def test_router_schema_boundaries_are_refused(endpoint: Endpoint, tmp_path: Path) -> None:
    schemathesis(
        endpoint.url,
        tmp_path,
        "--phases",
        "coverage",
        "--mode",
        "negative",
        *AUTH,
        "--include-path-regex",
        OWN,
    )


def test_router_admin_changes_conform(endpoint: Endpoint, tmp_path: Path) -> None:
    schemathesis(
        endpoint.url,
        tmp_path,
        "--phases",
        "examples,fuzzing",
        "--max-examples",
        str(ROUTER_FUZZ_EXAMPLES),
        *AUTH,
        "--include-path-regex",
        "^/admin/(scale|components)",
        checks=[*CHECKS, "ignored_auth"],
    )


def test_router_admin_down_conforms(endpoint: Endpoint, tmp_path: Path) -> None:
    """Last: the endpoint stops (no ignored_auth: its probe would come after, to a draining endpoint's 503;
    tests/unit/endpoint/test_openapi.py checks the key)."""
    schemathesis(
        endpoint.url,
        tmp_path,
        "--phases",
        "fuzzing",
        "--max-examples",
        "1",
        *AUTH,
        "--include-path-regex",
        "^/admin/down$",
    )
    endpoint.process.wait(timeout=60)
