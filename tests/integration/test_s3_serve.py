"""`llmhost serve s3://...` and `llmhost endpoint up` of an s3:// model end to end: a model from a prefix
and from a model.tar.gz, served by real processes that reach moto through a counting HTTP proxy on
127.0.0.1 (tests/s3proxy.py), so that what crosses the wire is what is asserted.

The model is a tiny random-weight Gemma 3 (tests/tinymodels.py, 14 MB: two of llmhost's 8 MiB ranges, so
a download is still ranged and shared range by range): what is tested is the transfer and the cache, the
same for any GGUF. The default model (253 MB) cost the module ~1 GB through moto and the proxy, both in
Python, and a tar.gz of it."""

from __future__ import annotations

import math
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import start_server, stop_server
from tests.integration.endpoint_helpers import ENGINE, start_endpoint, stop_endpoint
from tests.integration.test_custom_code import OUTPUT_ONLY
from tests.s3proxy import Proxy, s3_proxy
from tests.s3server import fake_credentials, moto_server
from tests.tinymodels import build_tiny_gguf

pytestmark = pytest.mark.integration

PART = 8 * 1024 * 1024  # llmhost's range size


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = build_tiny_gguf(tmp_path_factory.mktemp("tiny") / "model.gguf", arch="gemma3")
    assert path.stat().st_size > PART  # more than one range
    return path


@pytest.fixture(scope="module")
def proxy(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    archive = tmp_path_factory.mktemp("s3src") / "model.tar.gz"
    # level 1: GGUF weights barely compress, and level 9 would cost the test most of its time
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(model, arcname="model.gguf")
    with moto_server() as server:
        client = server.client()
        client.create_bucket(Bucket="models")
        client.upload_file(str(model), "models", "gemma/model.gguf")
        client.upload_file(str(archive), "models", "jobs/1/output/model.tar.gz")
        # a prefix as SageMaker takes one: the weights, and code/inference.py at its root
        client.copy_object(
            Bucket="models",
            Key="withcode/model.gguf",
            CopySource={"Bucket": "models", "Key": "gemma/model.gguf"},
        )
        client.put_object(
            Bucket="models", Key="withcode/code/inference.py", Body=textwrap.dedent(OUTPUT_ONLY).encode()
        )
        with s3_proxy(server.url) as p:
            yield p


@pytest.fixture
def env(proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Proxy:
    """Credentials in the environment; the endpoint (the proxy) on the command line; a fresh cache."""
    fake_credentials(monkeypatch, tmp_path / "cache")
    proxy.recorder.clear()
    return proxy


def _answers(url: str) -> None:
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "The sky is", "max_tokens": 4}, timeout=60)
    assert r.status_code == 200
    assert r.json()["choices"][0]["text"]


@pytest.mark.parametrize(
    ("ref", "key"),
    [
        ("s3://models/gemma/", "gemma/model.gguf"),
        ("s3://models/jobs/1/output/model.tar.gz", "jobs/1/output/model.tar.gz"),
    ],
)
def test_second_start_sends_no_get_of_the_object(
    env: Proxy, model: Path, ref: str, key: str, tmp_path: Path
) -> None:
    size = model.stat().st_size
    seen = []
    for start in ("first", "second"):
        (tmp_path / start).mkdir()
        env.recorder.clear()
        server = start_server(tmp_path / start, "--s3-endpoint-url", env.url, ref)
        try:
            _answers(server.url)
        finally:
            stop_server(server)
        seen.append(
            (
                len(env.recorder.object_gets(key)),
                env.recorder.count("HEAD"),
                env.recorder.count("GET", "list-type=2"),
            )
        )
    (first_gets, _, _), (second_gets, heads, lists) = seen
    assert first_gets >= math.ceil(size / PART) if ref.endswith("/") else first_gets >= 1
    # the second start only asks what the current version is: a listing or a HEAD, never the bytes
    assert second_gets == 0 and heads + lists >= 1
    cached = [p for p in (tmp_path / "cache").rglob("model.gguf") if p.is_file()]
    assert len(cached) == 1 and cached[0].stat().st_size == size
    # an archive is deleted once extracted: half the disk, and still nothing fetched again
    assert not [p for p in (tmp_path / "cache").rglob("*.tar.gz") if p.is_file()]


def test_an_s3_prefix_brings_its_inference_py(env: Proxy, tmp_path: Path) -> None:
    server = start_server(tmp_path, "--s3-endpoint-url", env.url, "s3://models/withcode/")
    try:
        tgi = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 4}}
        r = httpx.post(f"{server.url}/invocations", json=tgi, timeout=60)
        assert r.status_code == 200, r.text
        assert set(r.json()) == {"text", "accept"}  # output_fn's shape, not TGI's
    finally:
        stop_server(server)


def test_an_endpoints_copies_share_one_download(env: Proxy, model: Path, tmp_path: Path) -> None:
    size = model.stat().st_size
    ep = start_endpoint(
        tmp_path,
        f"""
name: shared
components:
  - name: gemma
    model: s3://models/gemma/
    copies: 2
    resources: {{num_cpus: 0.5, memory_mb: 600}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 120
""",
        args=("--s3-endpoint-url", env.url),
    )
    try:
        ep.wait_for(
            "both copies ready",
            lambda: [r["state"] for r in ep.replicas("gemma")] == ["ready"] * 2,
            timeout=120,
        )
        _answers(ep.url)
        gets = env.recorder.object_gets("gemma/model.gguf")
        # every range fetched once, for both copies; the prefix listed once (`up` checks, start reuses)
        assert len(gets) == math.ceil(size / PART) and len({g.range for g in gets}) == len(gets)
        assert env.recorder.count("GET", "list-type=2") == 1
        [component] = ep.status()["components"]
        starts = [
            line for p in ep.log_dir.glob("*.log") for line in p.read_text().splitlines() if "start:" in line
        ]
        # the copies are started (and restarted, if a busy machine made one miss its health checks) on the
        # local download, never on the s3:// reference
        assert len(starts) >= 2 and all(f"serve {component['model_dir']} " in line for line in starts)
    finally:
        stop_endpoint(ep)
