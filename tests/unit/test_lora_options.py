"""`--lora` as `llmhost serve` takes it: parsed, resolved as a model reference, refused clearly."""

from pathlib import Path

import pytest

from llmhost.engine.lora import AdapterSpec
from llmhost.settings.build import ServeOptions, build
from llmhost.store import ModelNotFoundError, resolve_model


def test_lora_options_become_the_engines_adapters(tmp_path: Path) -> None:
    a = tmp_path / "a.gguf"
    a.write_bytes(b"GGUF")  # read by llama.cpp only when the engine loads
    built = build(ServeOptions(str(resolve_model()), lora=[f"sql={a}", f"poet={a}:0.5"]), env={})
    assert built.settings.engine.adapters == (
        AdapterSpec("sql", str(a), 1.0),
        AdapterSpec("poet", str(a), 0.5),
    )


def test_a_missing_adapter_file_is_refused_naming_the_adapter(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="--lora sql: "):
        build(ServeOptions(str(resolve_model()), lora=[f"sql={tmp_path / 'none.gguf'}"]), env={})


def test_two_adapters_of_one_name_are_refused(tmp_path: Path) -> None:
    a = tmp_path / "a.gguf"
    a.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="sql given twice"):
        build(ServeOptions(str(resolve_model()), lora=[f"sql={a}", f"sql={a}"]), env={})


def test_lora_with_embeddings_is_refused(tmp_path: Path) -> None:
    a = tmp_path / "a.gguf"
    a.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="--lora applies to text generation"):
        build(ServeOptions(str(resolve_model()), lora=[f"sql={a}"], embeddings=True), env={})
