"""Which files are models: split parts as one, mmproj never, quantization types matched in names; the
hf:// reference forms; a model directory with several models refused, never chosen by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.store import resolve_model
from llmhost.store.ggufnames import GgufModel, group_models, matches_quant, model_of, pick_quant
from llmhost.store.hubref import HubModelError, HubRef, parse_hub_ref
from llmhost.store.model import AmbiguousModelError, ModelNotFoundError, model_in, model_parts

REPO = [
    "README.md",
    "mmproj-F16.gguf",
    "m-Q8_0.gguf",
    "m-Q4_K_M.gguf",
    "m-IQ4_K_M.gguf",
    "m-Q4_K_M_L.gguf",
    "big/m-F16-00002-of-00003.gguf",
    "big/m-F16-00001-of-00003.gguf",
    "big/m-F16-00003-of-00003.gguf",
]


def test_split_parts_are_one_model_and_mmproj_none() -> None:
    models = group_models(REPO)
    assert [m.first for m in models] == [
        "big/m-F16-00001-of-00003.gguf",
        "m-IQ4_K_M.gguf",
        "m-Q4_K_M.gguf",
        "m-Q4_K_M_L.gguf",
        "m-Q8_0.gguf",
    ]
    split = models[0]
    assert split.parts == tuple(f"big/m-F16-0000{i}-of-00003.gguf" for i in (1, 2, 3)) and not split.missing
    assert model_of("big/m-F16-00003-of-00003.gguf", models) is split
    assert model_of("mmproj-F16.gguf", models) is None


def test_a_split_model_lacking_parts_says_which() -> None:
    (model,) = group_models(["a-00001-of-00003.gguf", "a-00003-of-00003.gguf"])
    assert model.parts == ("a-00001-of-00003.gguf", "a-00003-of-00003.gguf")
    assert model.missing == ("a-00002-of-00003.gguf",)


@pytest.mark.parametrize(
    ("quant", "first"),
    [
        ("Q4_K_M", "m-Q4_K_M.gguf"),
        ("q4_k_m", "m-Q4_K_M.gguf"),
        ("q8_0", "m-Q8_0.gguf"),
        ("F16", "big/m-F16-00001-of-00003.gguf"),
        ("IQ4_K_M", "m-IQ4_K_M.gguf"),
    ],
)
def test_a_quant_picks_the_one_model_naming_it(quant: str, first: str) -> None:
    model, choices = pick_quant(group_models(REPO), quant)
    assert model is not None and model.first == first and choices == []


def test_no_quant_is_q4_k_m_else_the_only_model_else_the_choices() -> None:
    models = group_models(REPO)
    assert pick_quant(models, None)[0] == GgufModel("m-Q4_K_M.gguf", ("m-Q4_K_M.gguf",))
    only = group_models(["x-Q8_0.gguf", "mmproj-x.gguf"])
    assert pick_quant(only, None) == (only[0], [])
    two = group_models(["x-Q8_0.gguf", "x-Q6_K.gguf"])
    assert pick_quant(two, None) == (None, two)
    assert pick_quant(models, "Q5_K_M") == (None, models)


def test_quant_matching_needs_separators() -> None:
    (m,) = group_models(["Q4_K_M/model.gguf"])
    assert matches_quant(m, "q4_k_m")
    (m,) = group_models(["m.q4_k_m-00001-of-00002.gguf", "m.q4_k_m-00002-of-00002.gguf"])
    assert matches_quant(m, "Q4_K_M") and not matches_quant(m, "Q4_K")


@pytest.mark.parametrize(
    ("uri", "ref"),
    [
        ("hf://o/r", HubRef("o/r")),
        ("hf://o/r:Q4_K_M", HubRef("o/r", quant="Q4_K_M")),
        ("hf://o-x/r.y_z/sub/m-Q8_0.gguf", HubRef("o-x/r.y_z", file="sub/m-Q8_0.gguf")),
    ],
)
def test_hub_references(uri: str, ref: HubRef) -> None:
    assert parse_hub_ref(uri) == ref and ref.uri == uri


@pytest.mark.parametrize(
    "uri", ["hf://o", "hf://o/r/a.md", "hf://o/r/../x.gguf", "hf://o/r:", "hf://o/r:a b"]
)
def test_a_malformed_hub_reference_says_how_to_write_one(uri: str) -> None:
    with pytest.raises(HubModelError, match="hf://"):
        parse_hub_ref(uri)


def _files(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"GGUF")


def test_a_directory_with_two_models_is_refused_listing_them(tmp_path: Path) -> None:
    _files(tmp_path, "b.gguf", "a.gguf", "mmproj-a.gguf")
    with pytest.raises(AmbiguousModelError, match=r"holds 2 models \(a.gguf, b.gguf\)"):
        model_in(tmp_path)


def test_a_directory_model_is_its_one_model_split_or_not(tmp_path: Path) -> None:
    _files(tmp_path / "one", "mmproj-m.gguf", "m.gguf", "notes.txt")
    assert model_in(tmp_path / "one") == tmp_path / "one" / "m.gguf"
    _files(tmp_path / "split", *(f"s-0000{i}-of-00003.gguf" for i in (3, 1, 2)), "mmproj-s.gguf")
    first = model_in(tmp_path / "split")
    assert first.name == "s-00001-of-00003.gguf"
    assert [p.name for p in model_parts(first)] == [f"s-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert resolve_model(str(tmp_path / "split" / "s-00002-of-00003.gguf")) == first  # any part: from part 1
    _files(tmp_path / "nested", "inner/m.gguf", "inner/deeper/other.gguf")
    assert model_in(tmp_path / "nested") == tmp_path / "nested" / "inner" / "m.gguf"
    _files(tmp_path / "broken", "s-00001-of-00002.gguf")
    with pytest.raises(ModelNotFoundError, match=r"without its parts s-00002-of-00002\.gguf"):
        model_in(tmp_path / "broken")
    _files(tmp_path / "mm", "mmproj-only.gguf")
    with pytest.raises(ModelNotFoundError, match=r"no \*\.gguf model file"):
        model_in(tmp_path / "mm")


def test_an_optimize_artifact_knows_its_model(tmp_path: Path) -> None:
    _files(tmp_path, "model.gguf", "draft.gguf")
    (tmp_path / "artifact.json").write_text("{}")
    assert model_in(tmp_path) == tmp_path / "model.gguf"
