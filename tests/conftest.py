"""How `make test` spreads the suite over pytest-xdist workers (`-n 3`).

A test file's tests stay on one worker, so its module fixtures (a real server, a model loaded once)
start once; both Ray files run on one worker, one after the other: two Ray clusters at once would
compete for the same cores, and a local Ray started with no address joins a cluster it finds running."""

from __future__ import annotations

import os
import tempfile
from pathlib import PurePath
from typing import Any

import pytest

# `--cpu-top N`: what each test cost in CPU (make test prints it beside --durations)
pytest_plugins = ["tests.cpu_report"]

# the servers the tests start keep batch jobs under the user's data directory by default: each test
# process gets its own, so that no test reads or locks the real one (or another worker's)
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="llmhost-test-data-")

SHARED_SCOPES = {
    "test_endpoint_ray.py": "ray",
    "test_endpoint_ray_local.py": "ray",
}


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown where it is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED_SCOPES.get(PurePath(path).name, path)

    # keep the order of LONGEST_FIRST below: xdist's default (--loadscope-reorder) sorts the files by their
    # number of tests instead, which ran the Ray, tune and S3 files (few tests, minutes each) last, on one
    # worker while the others had finished
    config.option.loadscopereorder = False
    return FileScheduling(config, log)


# the longest files first (measured under `make test`: each over a minute of a worker's time), so that no
# worker starts one of them while the others have run out of files; the rest keep their order
LONGEST_FIRST = [
    "test_endpoint_ray.py",
    "test_endpoint_ray_local.py",
    "test_openapi_fuzz.py",
    "test_optimize.py",
    "test_endpoint.py",
    "test_speculative.py",
    "test_examples.py",
    "test_lm_eval.py",
    "test_openapi_fuzz_router.py",
    "test_tune.py",
    "test_endpoint_models_dir.py",
    "test_clients.py",
    "test_console.py",
    "test_s3_serve.py",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
