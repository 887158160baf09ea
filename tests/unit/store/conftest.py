"""A real moto S3 server on 127.0.0.1 for the store's tests, one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3server import S3Server, moto_server


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with moto_server() as s:
        yield s
