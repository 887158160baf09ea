"""llama.cpp's AMX weight buffers crash llama_decode (Sapphire Rapids, llama-cpp-python 0.3.36): a build
that has them loads weights without extra buffer types; any other build keeps repacking."""

from __future__ import annotations

import logging

import pytest

from llmhost.engine.llamacpp import backend as llama


def test_amx_builds_load_weights_withoutextra_buffers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    amx = b"CPU : AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |"
    monkeypatch.setattr(llama.lc, "llama_print_system_info", lambda: amx)
    with caplog.at_level(logging.WARNING, logger="llmhost.engine.llamacpp.backend"):
        assert llama.extra_buffers(True) is False
    assert "AMX" in caplog.text and "-mno-amx-int8" in caplog.text
    monkeypatch.setattr(llama.lc, "llama_print_system_info", lambda: b"CPU : AVX512 = 1 | REPACK = 1 |")
    assert llama.extra_buffers(True) is True
    assert llama.extra_buffers(False) is False


def test_this_build_has_no_amx_kernels() -> None:
    # `make` builds llama-cpp-python with -mno-amx-*: the repacked kernels stay in use here
    assert not llama.amx_built()
