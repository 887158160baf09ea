"""The GGUF structure check refuses every hostile file with the file and the reason, and passes the
real models."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmhost.engine.llamacpp.gguf_check import GGUFError, check_file, check_gguf
from tests.hostile_gguf import after, edit, truncate, write_gguf
from tests.tinymodels import smollm2_gguf


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "good.gguf")


def refused(path: Path, reason: str) -> None:
    with pytest.raises(GGUFError) as err:
        check_gguf(path)
    assert str(path) in str(err.value) and reason in str(err.value), str(err.value)


def test_a_written_file_and_the_real_models_pass(good: Path) -> None:
    from llmhost.store.resolve import default_model_path

    layout = check_gguf(good)[0]
    assert layout.metadata["tokenizer.ggml.tokens"] == 3 and layout.tensors["token_embd.weight"][0] == (32, 3)
    gemma = check_gguf(default_model_path())[0]
    assert gemma.metadata["general.architecture"] == "gemma3" and len(gemma.tensors) > 100
    check_gguf(smollm2_gguf())


def test_truncated_files(good: Path, tmp_path: Path) -> None:
    refused(truncate(good, tmp_path / "cut.gguf", 0.9), "lies past the end of the file")
    refused(truncate(good, tmp_path / "header.gguf", 0.2), "more than the file holds")
    refused(truncate(good, tmp_path / "key.gguf", 0.08), "runs past the end of the file")
    refused(truncate(good, tmp_path / "tiny.gguf", 0.01), "cut short")
    (tmp_path / "empty.gguf").write_bytes(b"")
    refused(tmp_path / "empty.gguf", "empty file")


def test_not_a_gguf_or_garbage_after_the_magic(tmp_path: Path) -> None:
    (tmp_path / "text.gguf").write_bytes(b"hello, this is not a model at all" * 10)
    refused(tmp_path / "text.gguf", "no GGUF magic")
    (tmp_path / "garbage.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 8)
    refused(tmp_path / "garbage.gguf", "GGUF version")


def test_corrupt_header(good: Path) -> None:
    refused(edit(good, 4, "<I", 99), "GGUF version 99")
    edit(good, 4, "<I", 3)
    refused(edit(good, 16, "<Q", 2**62), "more than the file holds")
    edit(good, 16, "<Q", 3)
    refused(edit(good, 8, "<Q", 2**40), "more than the file holds")


def test_corrupt_metadata(good: Path) -> None:
    # the architecture's value: its type (u32), then its length
    refused(edit(good, after(good, b"general.architecture") + 4, "<Q", 2**50), "runs past the end")


def test_absurd_vocabulary(good: Path, tmp_path: Path) -> None:
    # the token array: element type (u32), then its count
    refused(edit(good, after(good, b"tokenizer.ggml.tokens") + 8, "<Q", 2**40), "strings, more than the file")
    refused(write_gguf(tmp_path / "rows.gguf", tokens=4, rows=3), "vocabulary of 4 tokens, but token_embd")
    check_gguf(write_gguf(tmp_path / "padded.gguf", tokens=3, rows=4))  # rows beyond the vocabulary: padding


def test_absurd_context(good: Path) -> None:
    refused(edit(good, after(good, b"llama.context_length") + 4, "<I", 0), "is not a context length")


def test_corrupt_tensor_table(good: Path) -> None:
    name = after(good, b"token_embd.weight")  # then: n_dims u32, dims u64 x n_dims, type u32, offset u64
    # rows: a tensor larger than the file
    refused(edit(good, name + 4 + 8, "<Q", 2**40), "lies past the end of the file")
    edit(good, name + 4 + 8, "<Q", 3)
    refused(edit(good, name, "<I", 9), "dimensions")
    edit(good, name, "<I", 2)
    refused(edit(good, name + 4 + 16, "<I", 1000), "unknown type")
    edit(good, name + 4 + 16, "<I", 0)
    refused(edit(good, name + 4 + 20, "<Q", 3), "not aligned")
    refused(edit(good, name + 4 + 20, "<Q", 2**40), "lies past the end")


def test_split_with_a_part_missing(tmp_path: Path) -> None:
    first = write_gguf(tmp_path / "m-00001-of-00002.gguf", **{"split.count": 2, "split.no": 0})
    refused(first, "part 2 (m-00002-of-00002.gguf) is missing")
    write_gguf(tmp_path / "m-00002-of-00002.gguf", **{"split.count": 2, "split.no": 1})
    assert len(check_gguf(first)) == 2
    refused(tmp_path / "m-00002-of-00002.gguf", "load it from its first part")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, 799), st.integers(0, 255)), min_size=1, max_size=8),
    st.floats(0.05, 1.0),
)
def test_random_corruption_is_refused_or_read_never_crashes(
    tmp_path: Path, flips: list[tuple[int, int]], keep: float
) -> None:
    path = write_gguf(tmp_path / "fuzz.gguf")
    data = bytearray(path.read_bytes())
    for at, value in flips:
        data[at % len(data)] = value
    path.write_bytes(bytes(data[: max(1, int(len(data) * keep))]))
    try:
        check_file(path)
    except GGUFError as exc:
        assert str(path) in str(exc)


def test_read_arrays_reads_the_short_arrays_and_counts_the_long(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "vocab.gguf", tokens=70)
    assert check_file(path).metadata["tokenizer.ggml.tokens"] == 70  # by default every array is its length
    long = check_file(path, read_arrays=64)
    assert long.metadata["tokenizer.ggml.tokens"] == 70 and "tokenizer.ggml.tokens" in long.arrays
    short = check_file(path, read_arrays=70)
    assert short.metadata["tokenizer.ggml.tokens"] == [f"t{i}" for i in range(70)]
    assert short.arrays == {"tokenizer.ggml.tokens"} and short.metadata["llama.context_length"] == 64
    # an array claiming more elements than the file holds is refused before any is read
    edit(path, after(path, b"tokenizer.ggml.tokens") + 8, "<Q", 2**40)
    with pytest.raises(GGUFError, match="claims 1099511627776 elements, more than the file holds"):
        check_file(path, read_arrays=2**63)
