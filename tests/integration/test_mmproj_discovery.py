"""A model's multimodal projector found with it, as llama-server's `-hf` fetches one: an hf:// repository's
mmproj downloaded with its model (through a real huggingface_hub against the hub stand-in,
tests/hubserver.py) unless --no-mmproj, the one mmproj beside the model in a folder, and beside a
models_dir folder's model; --mmproj given wins; two candidates are refused naming both. On the tiny
vision pair of tests/tinymmproj.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmhost.endpoint.control.modelsdir import scan
from llmhost.endpoint.spec import ModelsDirSpec, SpecError
from llmhost.settings.build import ServeOptions, build
from llmhost.store.model import AmbiguousModelError
from tests.hubserver import Hub, hub_server
from tests.integration.conftest import start_server, stop_server
from tests.tinymmproj import Pair, build_vision_pair

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
    (models / "vision.yaml").unlink()
    (models / "vision" / "mmproj-2.gguf").symlink_to(pair.mmproj)
    with pytest.raises(SpecError, match="2 multimodal projectors beside it"):
        scan(ModelsDirSpec(path=str(models)))
