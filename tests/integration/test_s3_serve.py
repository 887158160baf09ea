"""`llmhost serve s3://...` end to end: the real model from a prefix and from a model.tar.gz."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmhost.store import resolve_model
from tests.integration.conftest import start_server, stop_server
from tests.s3server import S3Server, moto_server, point_env_at

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def s3_with_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    model = resolve_model("default")
    archive = tmp_path_factory.mktemp("s3src") / "model.tar.gz"
    # level 1: GGUF weights barely compress, and level 9 would cost the test most of its time
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(model, arcname="model.gguf")
    with moto_server() as server:
        client = server.client()
        client.create_bucket(Bucket="models")
        client.upload_file(str(model), "models", "gemma/model.gguf")
        client.upload_file(str(archive), "models", "jobs/1/output/model.tar.gz")
        yield server


def _answers(url: str) -> None:
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "The sky is", "max_tokens": 4}, timeout=60)
    assert r.status_code == 200
    assert r.json()["choices"][0]["text"]


@pytest.mark.parametrize("ref", ["s3://models/gemma/", "s3://models/jobs/1/output/model.tar.gz"])
def test_serve_from_s3(
    s3_with_model: S3Server, ref: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_env_at(monkeypatch, s3_with_model)
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # given on the command line instead
    monkeypatch.setenv("LLMHOST_CACHE", str(tmp_path / "cache"))
    logs = []
    for start in ("first", "second"):
        (tmp_path / start).mkdir()
        server = start_server(tmp_path / start, "--s3-endpoint-url", s3_with_model.url, ref)
        try:
            _answers(server.url)
        finally:
            stop_server(server)
        logs.append(server.log.read_text())
    assert "downloading s3://models/" in logs[0] and "verified s3://models/" in logs[0]
    # the second start finds the object's ETag and size in the cache: nothing is fetched again
    assert "downloading" not in logs[1] and "verified" not in logs[1]
    cached = [p for p in (tmp_path / "cache").rglob("model.gguf") if p.is_file()]
    assert cached and cached[0].stat().st_size == resolve_model("default").stat().st_size
