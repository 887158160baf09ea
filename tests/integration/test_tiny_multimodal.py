"""The tiny multimodal pairs (tests/tinymmproj.py) load in llama-cpp-python's own libmtmd and run:
an image and an audio clip become chunks of the size the projector's shape implies, evaluate into
the text model's KV, and greedy decoding after them is deterministic and depends on the media."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from llama_cpp import mtmd_cpp

from tests.mtmd_session import Chunk, MtmdSession
from tests.tinymmproj import (
    AUDIO_TOKENS,
    IMAGE_TOKENS,
    SAMPLE_RATE,
    build_audio_pair,
    build_gemma3_mmproj,
    build_mrope_pair,
    build_qwen2a_mmproj,
    build_qwen2vl_mmproj,
    build_vision_pair,
    png,
    random_pixels,
    tone,
    wav,
)

N_PREDICT = 8


def turn(content: str) -> str:
    """A user turn as CHAT_TEMPLATE renders it, less its BOS (which the tiny models do not need)."""
    return f"<start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n"


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MtmdSession]:
    pair = build_vision_pair(tmp_path_factory.mktemp("vision"))
    with MtmdSession(pair.model, pair.mmproj) as session:
        yield session


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MtmdSession]:
    pair = build_audio_pair(tmp_path_factory.mktemp("audio"))
    with MtmdSession(pair.model, pair.mmproj) as session:
        yield session


def test_the_projectors_are_seeded_and_small(tmp_path: Path) -> None:
    for build in (build_gemma3_mmproj, build_qwen2vl_mmproj, build_qwen2a_mmproj):
        a, b, c = (build(tmp_path / f"{build.__name__}-{i}.gguf", seed=s) for i, s in enumerate((0, 0, 1)))
        assert a.read_bytes() == b.read_bytes() != c.read_bytes()
        assert a.stat().st_size < 1 << 20


def test_an_image_is_one_chunk_of_the_pooled_patches_and_decodes_deterministically(
    vision: MtmdSession,
) -> None:
    assert vision.vision and not vision.audio and not vision.mrope
    assert vision.marker == mtmd_cpp.mtmd_default_marker().decode() == "<__media__>"
    pixels = random_pixels()
    encoded = vision.media(png(pixels))
    raw = vision.rgb(pixels)
    try:
        # a file's bitmap is named by its bytes' hash: what a cache of encoded media can key on
        assert mtmd_cpp.mtmd_bitmap_get_id(encoded) == hashlib.sha256(png(pixels)).hexdigest().encode()
        prompt = turn(f"What is in {vision.marker}?")
        first = vision.generate(prompt, [encoded], N_PREDICT)
        before, image, after = first.chunks
        # libmtmd wraps the embeddings in Gemma's markers, control tokens of the text chunks
        assert vision.detokenize(before.ids[-1:], special=True) == "<start_of_image>"
        assert vision.detokenize(after.ids[:1], special=True) == "<end_of_image>"
        assert image == Chunk("image", IMAGE_TOKENS, IMAGE_TOKENS)  # 8x8 patches pooled 2x2
        assert first.n_past == sum(c.n_pos for c in first.chunks)
        assert len(first.tokens) == N_PREDICT
        assert vision.generate(prompt, [encoded], N_PREDICT).tokens == first.tokens
        # the same pixels handed over decoded (RGB rows) are the same bitmap as the PNG's
        assert vision.generate(prompt, [raw], N_PREDICT).tokens == first.tokens
        other = vision.rgb(random_pixels(seed=1))
        try:
            # the embeddings reach the decoder: another image, another distribution
            assert vision.generate(prompt, [other], N_PREDICT).top[0] != first.top[0]
        finally:
            vision.free([other])
    finally:
        vision.free([encoded, raw])


def test_an_m_rope_image_lays_its_merged_patches_over_fewer_positions(tmp_path: Path) -> None:
    pair = build_mrope_pair(tmp_path)
    with MtmdSession(pair.model, pair.mmproj) as session:
        assert session.vision and session.mrope
        encoded = session.media(png(random_pixels()))  # 48x40: 12x10 patches of 4, merged 2x2
        try:
            prompt = turn(f"What is in {session.marker}?")
            first = session.generate(prompt, [encoded], N_PREDICT)
            before, image, after = first.chunks
            assert session.detokenize(before.ids[-1:], special=True) == "<|vision_start|>"
            assert session.detokenize(after.ids[:1], special=True) == "<|vision_end|>"
            # 6x5 embeddings over max(6, 5) positions: the text after the image starts 6 on
            assert image == Chunk("image", 30, 6)
            assert first.n_past == sum(c.n_pos for c in first.chunks)
            assert session.generate(prompt, [encoded], N_PREDICT).tokens == first.tokens
            other = session.media(png(random_pixels(seed=1)))
            try:
                assert session.generate(prompt, [other], N_PREDICT).top[0] != first.top[0]
            finally:
                session.free([other])
        finally:
            session.free([encoded])


def test_a_marker_without_its_bitmap_is_refused(vision: MtmdSession) -> None:
    pixels = vision.rgb(random_pixels())
    try:
        # more markers than bitmaps, and fewer: mtmd.h says 1 for both, this libmtmd returns 2
        for prompt in (turn(f"{vision.marker} and {vision.marker}"), turn("no marker")):
            with pytest.raises(ValueError, match="mtmd_tokenize returned 2"):
                vision.generate(prompt, [pixels], 1)
    finally:
        vision.free([pixels])


def test_a_short_clip_is_one_padded_30_s_window_and_decodes_deterministically(audio: MtmdSession) -> None:
    assert audio.audio and not audio.vision and audio.sample_rate == SAMPLE_RATE
    samples = tone()
    encoded = audio.media(wav(samples))
    # the samples as the WAV holds them (16-bit) and its decoder gives them back (over 32768)
    pcm = audio.pcm(np.round(samples * 32767) / 32768)
    try:
        prompt = turn(f"{audio.marker}What is this sound?")
        first = audio.generate(prompt, [encoded], N_PREDICT)
        before, clip, after = first.chunks
        assert audio.detokenize(before.ids[-1:], special=True) == "<|audio_bos|>"
        assert audio.detokenize(after.ids[:1], special=True) == "<|audio_eos|>"
        # 1 s is padded to one 30 s window: 3000 mel frames, 1500 after the stride-2 conv, 750 pooled
        assert clip == Chunk("audio", AUDIO_TOKENS, AUDIO_TOKENS)
        assert first.n_past == sum(c.n_pos for c in first.chunks)
        assert audio.generate(prompt, [encoded], N_PREDICT).tokens == first.tokens
        other = audio.media(wav(tone(hz=1000.0)))
        try:
            assert audio.generate(prompt, [other], N_PREDICT).top[0] != first.top[0]
        finally:
            audio.free([other])
        assert audio.generate(prompt, [pcm], N_PREDICT).tokens == first.tokens
    finally:
        audio.free([encoded, pcm])
