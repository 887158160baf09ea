"""How `make test` spreads the suite over pytest-xdist workers (`-n 3`).

A test file's tests stay on one worker, so its module fixtures (a real server, a model loaded once)
start once; both Ray files run on one worker, one after the other: two Ray clusters at once would
compete for the same cores, and a local Ray started with no address joins a cluster it finds running."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

import pytest

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

    return FileScheduling(config, log)
