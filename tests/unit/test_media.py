"""Media in prompts, the pure parts: magic bytes, the synthetic ids a medium's positions take, where a
cached prefix is cut back to, how the scheduler splits a prompt around media, the embeddings cache,
the chat parts read from a request and the projector file's check."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import gguf
import numpy as np
import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.prefix_cache import KvTrim, common_prefix_len
from llmhost.engine.llamacpp.projector import ProjectorError, check_projector
from llmhost.engine.media import MediaSpan, kv_cells, media_floor, media_ids, sniff, text_ids
from llmhost.engine.media_cache import EmbeddingCache
from llmhost.engine.sched.scheduler import Scheduler
from llmhost.engine.sched.sequence import Sequence
from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.server.serving.media import ChatMedia, base64_media
from llmhost.server.serving.media import chat_media as chat_media_async
from llmhost.server.serving.media_sources import MediaSources
from llmhost.web.errors import APIError

RED = "a" * 64
BLUE = "b" * 64


def span(start: int, n: int, sha: str = RED) -> MediaSpan:
    return MediaSpan(start, n, n, "image", sha, None)


def test_a_prompts_kv_cells_count_an_m_rope_mediums_embeddings_past_its_positions() -> None:
    flat, mrope = span(2, 16), MediaSpan(20, 6, 30, "image", RED, None)  # 30 embeddings, 6 positions
    assert kv_cells(40, (flat, mrope)) == 40 + 24
    assert kv_cells(26, (flat, mrope)) == 26 + 24  # a prefix ending with the medium holds it whole
    assert kv_cells(25, (flat, mrope)) == 25  # one ending before the medium's end: not yet
    assert kv_cells(18, (flat,)) == 18  # one embedding a position


def test_formats_are_told_by_their_magic_bytes() -> None:
    assert sniff(b"\x89PNG\r\n\x1a\n....") == ("image", "png")
    assert sniff(b"\xff\xd8\xff\xe0") == ("image", "jpeg")
    assert sniff(b"GIF89a") == ("image", "gif")
    assert sniff(b"BM\x00\x00") == ("image", "bmp")
    assert sniff(b"RIFF\x00\x00\x00\x00WAVEfmt ") == ("audio", "wav")
    assert sniff(b"fLaC") == ("audio", "flac")
    assert sniff(b"ID3\x04") == ("audio", "mp3")
    assert sniff(b"\xff\xfb\x90") == ("audio", "mp3")
    # what libmtmd would hand to ffprobe (video, WEBP), and text
    for data in (b"RIFF\x00\x00\x00\x00WEBPVP8 ", b"\x00\x00\x00\x18ftypmp42", b"hello", b""):
        assert sniff(data) is None


def test_a_mediums_ids_are_its_hashs_negative_and_differ_from_the_first_position() -> None:
    red = media_ids(RED, 16)
    assert red == media_ids(RED, 16) and len(set(red)) == 16 and all(t < 0 for t in red)
    blue = media_ids(BLUE, 16)
    prompt = [5, 6]
    # two prompts with the same image share it; with different ones they part where it starts
    assert common_prefix_len(prompt + red + [7], prompt + red + [8]) == 2 + 16
    assert common_prefix_len(prompt + red + [7], prompt + blue + [7]) == 2
    assert text_ids(prompt + red + [7]) == [5, 6, 7]


def test_a_prefix_ending_inside_a_medium_is_cut_back_to_its_start() -> None:
    spans = (span(2, 16), span(20, 4, BLUE))
    assert [media_floor(n, spans) for n in (0, 2, 3, 17, 18, 19, 21, 24, 30)] == [
        0,
        2,
        2,
        2,
        18,
        19,
        20,
        24,
        30,
    ]


def media_seq(rid: str, prompt: list[int], spans: tuple[MediaSpan, ...]) -> Sequence:
    return Sequence(request_id=rid, prompt=prompt, max_tokens=4, arrival_s=0.0, media=spans)


def test_a_prompt_is_prefilled_in_chunks_cut_before_each_medium_and_each_medium_whole() -> None:
    s = Scheduler(
        EngineConfig(max_concurrent=2, max_batch_tokens=8, max_input_tokens=64, max_total_tokens=128)
    )
    image = span(3, 16)
    prompt = [1, 2, 3, *media_ids(RED, 16), 4, 5]
    a = media_seq("a", prompt, (image,))
    s.add(a)
    chunks = []
    while a.output == []:
        plan = s.schedule(0.0)
        chunks += [(i.start_pos, len(i.tokens), i.media is not None, i.sample) for i in plan.items]
        s.postprocess(plan, {"a": [9]} if any(i.sample for i in plan.items) else {}, 0.0)
    # the medium is decoded whole although it is wider than the step's budget of 8 tokens
    assert chunks == [(0, 3, False, False), (3, 16, True, False), (19, 2, False, True)]


def test_a_prefix_shared_into_a_medium_is_trimmed_back_at_admission() -> None:
    s = Scheduler(
        EngineConfig(max_concurrent=2, max_batch_tokens=64, max_input_tokens=64, max_total_tokens=128)
    )
    ids = media_ids(RED, 16)
    # a cached sequence holding the medium's first half only (it never happens through the engine, which
    # decodes a medium whole, but a KV cut elsewhere must not leave half a medium for the next prompt)
    first = media_seq("a", [1, 2, *ids[:8], 3], ())
    s.add(first)
    while not first.output:
        run = s.schedule(0.0)
        s.postprocess(run, {"a": [9]} if any(i.sample for i in run.items) else {}, 0.0)
    s.finish(first)
    second = media_seq("b", [1, 2, *ids, 4], (span(2, 16),))
    s.add(second)
    plan = s.schedule(0.0)
    assert second.n_reused == 2
    assert KvTrim(second.kv_seq, 2) in plan.kv_ops
    assert plan.items[0].media is not None and plan.items[0].start_pos == 2


def test_the_embeddings_cache_keeps_the_recent_within_its_bytes() -> None:
    cache = EmbeddingCache(budget_bytes=3 * 64)
    blocks = {k: np.full((4, 4), i, np.float32) for i, k in enumerate("abcd")}  # 64 bytes each
    for key in "abc":
        cache.put(key, blocks[key])
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", blocks["d"])
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 3
    assert (cache.hits, cache.misses) == (2, 1) and cache.bytes == 3 * 64
    cache.put("big", np.zeros((8, 8), np.float32))  # alone over the budget: not kept
    assert cache.get("big") is None


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
WAV = b"RIFF\x00\x00\x00\x00WAVEfmt " + b"\x00" * 32


def chat(*parts: dict[str, object]) -> ChatCompletionRequest:
    content = [{"type": "text", "text": "see "}, *parts]
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": content}]})


def image(data: bytes) -> dict[str, object]:
    return {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()},
    }


def chat_media(body: ChatCompletionRequest, max_bytes: int) -> ChatMedia:
    """The media of `body` on a server that allows no remote host and no media folder."""
    return asyncio.run(chat_media_async(body, MediaSources(max_bytes)))


def audio(data: bytes) -> dict[str, object]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}}


def test_chat_parts_become_media_in_order_with_markers_in_the_text() -> None:
    body = chat(image(PNG), {"type": "text", "text": " and "}, audio(WAV))
    media = chat_media(body, 1 << 20)
    assert [(m.kind, m.sha256) for m in media.inputs] == [
        ("image", hashlib.sha256(PNG).hexdigest()),
        ("audio", hashlib.sha256(WAV).hexdigest()),
    ]
    assert media.fields == ["messages[0].content[1].image_url.url", "messages[0].content[3].input_audio.data"]
    assert body.messages[0].text() == "see <__media__> and <__media__>"
    assert not chat_media(chat(), 1 << 20)


@pytest.mark.parametrize(
    ("part", "says"),
    [
        ({"type": "image_url", "image_url": {"url": "http://10.0.0.1/x.png"}}, "not fetched"),
        ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "only under --media-path"),
        ({"type": "image_url", "image_url": {"url": "ftp://h/x.png"}}, "must be a data: URI"),
        ({"type": "image_url", "image_url": {"url": "data:image/png,rawbytes"}}, "must be base64"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,***"}}, "not valid base64"),
        (image(b"GIF89a" + b"\x00" * 2000), "more than --max-media-bytes 1024"),
        (image(WAV), "wav, not image"),
        (audio(PNG), "png, not audio"),
        (audio(b"\x00\x00\x00\x18ftypmp42"), "of no image or audio format"),
    ],
)
def test_a_part_that_cannot_be_used_is_a_400_naming_its_field(part: dict[str, object], says: str) -> None:
    with pytest.raises(APIError) as caught:
        chat_media(chat(part), 1024)
    field = "image_url.url" if part["type"] == "image_url" else "input_audio.data"
    assert caught.value.status == 400 and caught.value.field == f"messages[0].content[1].{field}"
    assert says in caught.value.message


def test_bare_base64_media_are_images_or_audio_by_their_bytes() -> None:
    """Ollama's `images` and llama-server's `multimodal_data`: one list, each medium's kind its bytes'."""
    items = [("images[0]", base64.b64encode(WAV).decode()), ("images[1]", base64.b64encode(PNG).decode())]
    media = base64_media(items, 1 << 20)
    assert [m.kind for m in media.inputs] == ["audio", "image"] and media.fields == ["images[0]", "images[1]"]
    for data, says in [("***", "not valid base64"), (base64.b64encode(b"hi").decode(), "no image or audio")]:
        with pytest.raises(APIError) as caught:
            base64_media([items[0], ("images[1]", data)], 1 << 20)
        assert caught.value.field == "images[1]" and says in caught.value.message
    with pytest.raises(APIError) as caught:
        base64_media(items, 16)
    assert (
        caught.value.field == "images[0]" and "bytes, more than --max-media-bytes 16" in caught.value.message
    )


def projector_file(path: Path, arch: str, width: int) -> Path:
    w = gguf.GGUFWriter(path, arch)
    w.add_uint32(f"{arch}.vision.projection_dim", width)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_projector_for_another_model_is_refused_naming_both_files(tmp_path: Path) -> None:
    check_projector(projector_file(tmp_path / "ok.gguf", "clip", 64), "model.gguf", 64)
    with pytest.raises(
        ProjectorError, match=r"wide.gguf does not fit the model model.gguf: .* 96-wide .* 64-wide"
    ):
        check_projector(projector_file(tmp_path / "wide.gguf", "clip", 96), "model.gguf", 64)
    with pytest.raises(ProjectorError, match="not a multimodal projector"):
        check_projector(projector_file(tmp_path / "llama.gguf", "llama", 64), "model.gguf", 64)


def test_a_media_path_that_is_no_folder_is_refused_before_the_model_is_looked_for(tmp_path: Path) -> None:
    from llmhost.settings.build import ServeOptions, build

    with pytest.raises(ValueError, match=f"--media-path {tmp_path / 'none'}: no such folder"):
        build(ServeOptions(str(tmp_path / "no-model"), media_path=str(tmp_path / "none")), env={})
