"""The command-line option every command that takes a model reference shares for s3:// models."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from llmhost.store.s3client import LLMHOST_ENDPOINT_ENV

S3EndpointOpt = Annotated[
    str,
    typer.Option(
        "--s3-endpoint-url",
        help=(
            "S3-compatible endpoint for s3:// models (MinIO, Ceph...); env "
            "LLMHOST_S3_ENDPOINT_URL or AWS_ENDPOINT_URL."
        ),
    ),
]


def use_s3_endpoint(url: str) -> None:
    """Through the environment: the store's S3 client reads it there, and so do the processes this one
    starts (an endpoint's copies, a sweep's servers)."""
    if url:
        os.environ[LLMHOST_ENDPOINT_ENV] = url
