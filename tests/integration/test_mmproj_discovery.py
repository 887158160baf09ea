"""A model's multimodal projector found with it, as llama-server's `-hf` fetches one: an hf:// repository's
mmproj downloaded with its model (through a real huggingface_hub against the hub stand-in,
tests/hubserver.py) unless --no-mmproj, the one mmproj beside the model in a folder, and beside a
models_dir folder's model; --mmproj given wins, named by any model reference (hf://, s3:// against
moto's server, a folder); two candidates are refused naming both. An endpoint's component finds its
projector as serve does and hands its copies the cached file. On the tiny vision pair of
tests/tinymmproj.py."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from llmhost.endpoint.control.manager import resolve
from llmhost.endpoint.control.modelsdir import scan
from llmhost.endpoint.control.replica import copy_command
from llmhost.endpoint.control_errors import ModelRefError
from llmhost.endpoint.spec import ComponentSpec, ModelsDirSpec, SpecError
from llmhost.settings.build import ServeOptions, build
from llmhost.store.model import AmbiguousModelError, ModelNotFoundError
from tests.hubserver import Hub, hub_server
from tests.integration.conftest import start_server, stop_server
from tests.integration.endpoint_helpers import start_endpoint, stop_endpoint
from tests.s3server import moto_server, point_env_at
from tests.tinymmproj import Pair, build_vision_pair, png, random_pixels

pytestmark = pytest.mark.integration
LIMITS = ("--max-concurrent", "1", "--max-input-tokens", "256", "--max-total-tokens", "512")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return build_vision_pair(tmp_path_factory.mktemp("vision") / "pair")


@pytest.fixture
def hub(pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    """The stand-in with a repository of one model and one mmproj, and one of two mmproj; this
    process's huggingface_hub pointed at it, an empty cache."""
    with hub_server() as hub:
        hub.add("acme/vision-GGUF", {"vision-Q8_0.gguf": pair.model, "mmproj-vision-F16.gguf": pair.mmproj})
        hub.add(
            "acme/twice-GGUF",
            {"vision-Q8_0.gguf": pair.model, "mmproj-F16.gguf": pair.mmproj, "mmproj-F32.gguf": pair.mmproj},
        )
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE"):
            monkeypatch.delenv(name, raising=False)
        yield hub


def mmproj_of(model: str, **options: object) -> str:
    """The projector `llmhost serve MODEL` would load with these options."""
    return build(ServeOptions(model, **options), env={}).settings.engine.mmproj  # type: ignore[arg-type]


def test_an_hf_repositorys_mmproj_comes_with_its_model_unless_refused(hub: Hub, pair: Pair) -> None:
    sha = hub.repos["acme/vision-GGUF"].files["mmproj-vision-F16.gguf"].sha256  # the CDN's name of it
    assert mmproj_of("hf://acme/vision-GGUF:Q8_0", no_mmproj=True) == ""
    assert not hub.gets(sha)  # not even downloaded
    assert mmproj_of("hf://acme/vision-GGUF:Q8_0", mmproj=str(pair.mmproj)) == str(pair.mmproj)
    assert not hub.gets(sha)
    found = Path(mmproj_of("hf://acme/vision-GGUF:Q8_0"))
    assert found.name == "mmproj-vision-F16.gguf" and found.read_bytes() == pair.mmproj.read_bytes()
    assert len(hub.gets(sha)) == 1
    with pytest.raises(AmbiguousModelError) as refused:
        mmproj_of("hf://acme/twice-GGUF:Q8_0")
    said = str(refused.value)
    assert "hf://acme/twice-GGUF/mmproj-F16.gguf" in said and "hf://acme/twice-GGUF/mmproj-F32.gguf" in said
    assert "--no-mmproj" in said
    assert len(hub.gets(sha)) == 1  # the same bytes as those two: neither downloaded again


def test_a_folder_with_one_model_and_one_mmproj_serves_both(pair: Pair, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "gemma-vision.gguf").symlink_to(pair.model)
    (folder / "mmproj-gemma-vision.gguf").symlink_to(pair.mmproj)
    srv = start_server(tmp_path, str(folder), *LIMITS)
    try:
        card = httpx.get(f"{srv.url}/v1/models", timeout=10).json()["data"][0]
        assert "vision" in card["capabilities"], card
    finally:
        stop_server(srv)
    assert mmproj_of(str(folder), no_mmproj=True) == ""
    (folder / "mmproj-other.gguf").symlink_to(pair.mmproj)
    with pytest.raises(AmbiguousModelError) as refused:
        mmproj_of(str(folder))
    assert str(folder / "mmproj-gemma-vision.gguf") in str(refused.value)
    assert str(folder / "mmproj-other.gguf") in str(refused.value)
    assert mmproj_of(str(folder), mmproj=str(pair.mmproj)) == str(pair.mmproj)  # given: it wins
    with pytest.raises(ValueError, match="--mmproj and --no-mmproj do not go together"):
        mmproj_of(str(folder), mmproj=str(pair.mmproj), no_mmproj=True)


def test_a_models_dir_model_takes_the_mmproj_beside_it(pair: Pair, tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "vision").mkdir(parents=True)
    (models / "vision" / "model.gguf").symlink_to(pair.model)
    (models / "vision" / "mmproj.gguf").symlink_to(pair.mmproj)
    (models / "text.gguf").symlink_to(pair.model)
    by_name = {c.name: c for c in scan(ModelsDirSpec(path=str(models)))}
    assert by_name["vision"].engine.mmproj == str(models / "vision" / "mmproj.gguf")
    assert by_name["text"].engine.mmproj is None
    (models / "vision.yaml").write_text(f"engine:\n  mmproj: {pair.mmproj}\n")
    (component,) = (c for c in scan(ModelsDirSpec(path=str(models))) if c.name == "vision")
    assert component.engine.mmproj == str(pair.mmproj)  # its NAME.yaml's wins
    (models / "vision.yaml").write_text("engine:\n  no_mmproj: true\n")
    (component,) = (c for c in scan(ModelsDirSpec(path=str(models))) if c.name == "vision")
    assert component.engine.mmproj is None and component.engine.no_mmproj
    (models / "vision.yaml").unlink()
    (models / "vision" / "mmproj-2.gguf").symlink_to(pair.mmproj)
    with pytest.raises(SpecError, match="2 multimodal projectors beside it"):
        scan(ModelsDirSpec(path=str(models)))


def test_mmproj_takes_a_projector_by_any_model_reference(
    hub: Hub, pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = str(pair.model)
    got = Path(mmproj_of(model, mmproj="hf://acme/vision-GGUF/mmproj-vision-F16.gguf"))
    assert got.name == "mmproj-vision-F16.gguf" and got.read_bytes() == pair.mmproj.read_bytes()
    assert Path(mmproj_of(model, mmproj="hf://acme/vision-GGUF")) == got  # the repository's one projector
    assert Path(mmproj_of(model, mmproj="hf://acme/twice-GGUF:F32")).name == "mmproj-F32.gguf"
    for ref, says in [
        ("hf://acme/twice-GGUF", "holds 2 multimodal projectors (in the repository); name one by its file: "),
        ("hf://acme/vision-GGUF/vision-Q8_0.gguf", "vision-Q8_0.gguf is a model, not a multimodal projector"),
        (str(tmp_path), "no multimodal projector (an mmproj GGUF) in the folder"),
        ("s3://models/vision/", "name the projector's .gguf object (not a prefix or an archive)"),
    ]:
        with pytest.raises(ModelNotFoundError) as refused:
            mmproj_of(model, mmproj=ref)
        assert str(refused.value).startswith(f"--mmproj {ref}") and says in str(refused.value), refused.value
    with moto_server() as s3:
        point_env_at(monkeypatch, s3)
        monkeypatch.setenv("LLMHOST_CACHE", str(tmp_path / "cache"))
        bucket = s3.client()
        bucket.create_bucket(Bucket="models")
        bucket.upload_file(str(pair.model), "models", "vision/model.gguf")
        bucket.upload_file(str(pair.mmproj), "models", "vision/mmproj-model.gguf")
        given = Path(mmproj_of(model, mmproj="s3://models/vision/mmproj-model.gguf"))
        found = Path(mmproj_of("s3://models/vision/"))  # a prefix's model brings the projector beside it
    assert given.read_bytes() == found.read_bytes() == pair.mmproj.read_bytes()
    assert (given.parent, found.parent) != (pair.mmproj.parent,) * 2  # both in the llmhost cache


def test_an_endpoint_component_gets_its_projector_as_serve_would(hub: Hub, pair: Pair) -> None:
    vision = ComponentSpec(name="v", model="hf://acme/vision-GGUF:Q8_0")
    resolved = resolve(vision)
    assert [Path(p).name for p in resolved.mmproj] == ["mmproj-vision-F16.gguf"]
    argv = copy_command(vision, resolved.serve_ref, 9000, 1, mmproj=resolved.mmproj[0])
    assert argv[argv.index("--mmproj") + 1] == resolved.mmproj[0]  # the cached file: no copy downloads
    text = ComponentSpec(name="t", model="hf://acme/vision-GGUF:Q8_0", engine={"no_mmproj": True})
    assert resolve(text).mmproj == ()
    given = {"mmproj": "hf://acme/twice-GGUF/mmproj-F32.gguf"}
    (path,) = resolve(ComponentSpec(name="g", model=str(pair.model), engine=given)).mmproj
    assert Path(path).name == "mmproj-F32.gguf"
    with pytest.raises(ModelRefError) as refused:
        resolve(ComponentSpec(name="w", model="hf://acme/twice-GGUF:Q8_0"))
    said = str(refused.value)
    assert refused.value.field == "engine.mmproj" and "mmproj-F16.gguf" in said and "mmproj-F32.gguf" in said
    with pytest.raises(ModelRefError, match=r"component 'x': engine.mmproj hf://acme/twice-GGUF: .* 2 multi"):
        resolve(ComponentSpec(name="x", model=str(pair.model), engine={"mmproj": "hf://acme/twice-GGUF"}))
    with pytest.raises(ValidationError, match=r"engine\.mmproj and engine\.no_mmproj do not go together"):
        ComponentSpec(name="y", model=str(pair.model), engine={"mmproj": str(pair.mmproj), "no_mmproj": True})


def test_an_endpoint_of_an_hf_vision_model_reads_images_unless_told_not_to(hub: Hub, tmp_path: Path) -> None:
    def component(name: str, engine: str) -> str:
        return (
            f"  - {{name: {name}, model: 'hf://acme/vision-GGUF:Q8_0', resources: {{num_cpus: 0.5, "
            f"memory_mb: 400}}, engine: {{{engine}max_input_tokens: 128, max_total_tokens: 256}}}}\n"
        )

    yaml = "name: mm\ncomponents:\n" + component("seeing", "") + component("reading", "no_mmproj: true, ")
    ep = start_endpoint(tmp_path, yaml)
    try:
        ep.wait_for("both ready", lambda: all(c["ready"] == 1 for c in ep.status()["components"]), 120)
        url = "data:image/png;base64," + base64.b64encode(png(random_pixels())).decode()
        content = [{"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": url}}]
        answers = {
            name: httpx.post(
                f"{ep.url}/v1/chat/completions",
                json={"model": name, "messages": [{"role": "user", "content": content}], "max_tokens": 2},
                timeout=120,
            )
            for name in ("seeing", "reading")
        }
    finally:
        stop_endpoint(ep)
    assert answers["seeing"].status_code == 200, answers["seeing"].text
    assert answers["reading"].status_code == 400 and "text only" in answers["reading"].text
