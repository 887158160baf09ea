"""Downloads that go wrong on the way to an endpoint's copies, through `llmhost endpoint up` and `endpoint
add`: a transfer cut mid-file is taken up again and the checked file served; a file whose bytes arrive
altered is never served: fetched again, or, altered every time, refused naming the file and the reason
while the endpoint's other components keep serving. The hub is tests/hubserver.py (huggingface_hub
downloads from it), S3 is moto behind tests/s3proxy.py (which cuts and alters what passes). The models
are tiny random-weight GGUFs (tests/tinymodels.py, 8 MB)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.hubserver import Hub, hub_server
from tests.integration.endpoint_helpers import ENGINE, Endpoint, start_endpoint, stop_endpoint
from tests.s3proxy import Faults, s3_proxy
from tests.s3server import fake_credentials, moto_server
from tests.tinymodels import build_tiny_gguf

pytestmark = pytest.mark.integration
RESOURCES = "{num_cpus: 0.5, memory_mb: 400}"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three models of different bytes (seeds), so that each is a blob of its own on the hub."""
    tmp = tmp_path_factory.mktemp("models")
    return {name: build_tiny_gguf(tmp / f"{name}.gguf", seed=i) for i, name in enumerate(("a", "b", "c"))}


def component(name: str, model: str) -> str:
    return (
        f"  - {{name: {name}, model: '{model}', resources: {RESOURCES}, engine: {ENGINE}, "
        "startup_health_check_timeout_s: 120}\n"
    )


def answers(ep: Endpoint, model: str) -> bool:
    body = {"model": model, "prompt": "The sky is", "max_tokens": 3}
    r = httpx.post(f"{ep.url}/v1/completions", json=body, timeout=120)
    return r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1


def add(ep: Endpoint, tmp: Path, text: str) -> tuple[int, str]:
    file = tmp / "added.yaml"
    file.write_text(text)
    done = ep.cli("add", str(file))
    return done.returncode, " ".join((done.stderr + done.stdout).split())


@pytest.fixture
def hub(models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    with hub_server() as hub:
        hub.add("acme/tiny-GGUF", {f"{n}-Q8_0.gguf": p for n, p in models.items()})
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE"):
            monkeypatch.delenv(name, raising=False)
        yield hub


def test_hub_downloads_cut_or_altered_are_never_served(hub: Hub, tmp_path: Path) -> None:
    hub.cut_once.add("a-Q8_0.gguf")
    hub.corrupt_once.add("b-Q8_0.gguf")
    yaml = (
        "name: dl\ncomponents:\n"
        + component("cut", "hf://acme/tiny-GGUF/a-Q8_0.gguf")
        + component("altered", "hf://acme/tiny-GGUF/b-Q8_0.gguf")
    )
    ep = start_endpoint(tmp_path, yaml)
    try:
        ep.wait_for("both ready", lambda: all(c["ready"] == 1 for c in ep.status()["components"]), 120)
        assert answers(ep, "cut") and answers(ep, "altered")
        # the cut transfer taken up again (a Range for the rest where huggingface_hub had written some of
        # it, test_hub's 253 MB download; this 8 MB one had none on disk yet); the altered one fetched
        # whole a second time
        files = hub.repos["acme/tiny-GGUF"].files
        assert len(hub.gets(files["a-Q8_0.gguf"].sha256)) == 2
        assert [g.range for g in hub.gets(files["b-Q8_0.gguf"].sha256)] == [None, None]
        log = ep.log.read_text()
        assert "a-Q8_0.gguf" in log and "resuming (attempt 2 of 4)" in log, log
        assert "b-Q8_0.gguf arrived altered" in log and "fetching it again" in log, log
        assert log.count("(sha256 check)") == 2, log

        hub.corrupt_always.add("c-Q8_0.gguf")
        code, said = add(ep, tmp_path, "components:\n" + component("bad", "hf://acme/tiny-GGUF/c-Q8_0.gguf"))
        assert code == 1 and "component 'bad'" in said and "c-Q8_0.gguf arrived altered 2 times" in said, said
        assert answers(ep, "cut") and answers(ep, "altered")  # the others kept serving
        assert [c["name"] for c in ep.status()["components"]] == ["cut", "altered"]
        cache = tmp_path / "hf" / "hub"
        # nothing of the altered file stays to be served: no snapshot entry, no blob, no partial
        assert not list(cache.rglob("c-Q8_0.gguf")) and not list(cache.rglob("*.incomplete"))
        assert not (cache / "models--acme--tiny-GGUF" / "blobs" / files["c-Q8_0.gguf"].sha256).exists()
    finally:
        stop_endpoint(ep)


def test_s3_downloads_cut_or_altered_are_never_served(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_credentials(monkeypatch, tmp_path / "cache")
    faults = Faults(cut_first_range_get=True)
    with moto_server() as server, s3_proxy(server.url, faults) as proxy:
        client = server.client()
        client.create_bucket(Bucket="models")
        for name in ("a", "c"):
            client.upload_file(str(models[name]), "models", f"{name}/model.gguf")
        ep = start_endpoint(
            tmp_path,
            "name: dl\ncomponents:\n" + component("cut", "s3://models/a/model.gguf"),
            args=("--s3-endpoint-url", proxy.url),
        )
        try:
            assert answers(ep, "cut")
            assert faults.ranges_cut  # a range was cut, fetched again, and the whole file checked
            log = ep.log.read_text()
            assert "try 2 of" in log and "verified s3://models/a/model.gguf (" in log, log

            faults.cut_first_range_get, faults.flip_get_byte = False, True
            code, said = add(ep, tmp_path, "components:\n" + component("bad", "s3://models/c/model.gguf"))
            assert code == 1 and "component 'bad'" in said and "s3://models/c/model.gguf" in said, said
            # each altered transfer is refused (boto3's checksum of the response, else the file's ETag
            # check once whole) and fetched again, up to the tries, then the add fails saying why
            assert "checksum" in said or "failed its" in said, said
            assert len(proxy.recorder.object_gets("c/model.gguf")) >= 2
            assert answers(ep, "cut")  # the other component kept serving
            assert [c["name"] for c in ep.status()["components"]] == ["cut"]
            # the only file under its name is the whole, checked one: an altered one is never published
            # (a partial download may stay beside it, for a later start to resume from)
            served = [p for p in (tmp_path / "cache").rglob("model.gguf") if p.is_file()]
            assert len(served) == 1 and served[0].read_bytes() == models["a"].read_bytes(), served
        finally:
            stop_endpoint(ep)
