"""Images and audio through `llmhost serve --mmproj` and the openai and anthropic clients, unchanged:
the tiny pairs of tests/tinymmproj.py answer as libmtmd driven in-process answers the same rendered prompt
(tests/mtmd_session.py, which matched llama-server --mmproj in benchmarks/mtmd_peer_check.py), alone
and four at once; a repeated image is a prefix-cache hit and is not encoded again; what cannot be
used is a 400 naming the part, and the server answers afterwards."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx
import llama_cpp
import numpy as np
import ollama
import openai
import pytest

from llmhost.bench import BenchConfig, run_benchmark
from llmhost.engine.config import EngineConfig
from llmhost.engine.engine import Engine
from llmhost.engine.kv.memory_fit import RUNTIME_MARGIN_MB, prompt_logits_bytes, rss_bytes
from llmhost.engine.llamacpp.gguf_check import check_file
from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.engine.media import MediaInput, MediaLimits, MediaSpan
from llmhost.engine.projector_memory import projector_memory
from llmhost.engine.request import GenerationRequest, SamplingParams, Timings
from llmhost.server.serving.apis.transcriptions import instruction
from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.endpoint_helpers import start_endpoint, stop_endpoint
from tests.mtmd_session import MtmdSession
from tests.tinymmproj import (
    IMAGE_TOKENS,
    Pair,
    build_audio_pair,
    build_mrope_pair,
    build_vision_pair,
    png,
    random_pixels,
    tone,
    wav,
)

N_PREDICT = 8
QUESTION = "What is in "
MARKER = "<__media__>"
ARGS = ("--max-concurrent", "4", "--max-input-tokens", "1536", "--max-total-tokens", "2048")
ARGS += ("--max-batch-tokens", "1024", "--no-chat-embeddings")
# the test images are 48x40 random pixels (1,920; about 6 kB as PNG)
MAX_PIXELS = 2000
MAX_BYTES = 10_000


def turn(content: str) -> str:
    """A user turn as the pairs' chat template renders it, less its BOS."""
    return f"<start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n"


def rendered(session: MtmdSession, content: str) -> str:
    """A user turn as the pairs' chat template renders it: its BOS token's text first."""
    bos = session.detokenize([llama_cpp.llama_vocab_bos(session.vocab)], special=True)
    return bos + turn(content)


def expected(pair: Pair, media: list[bytes]) -> list[str]:
    """The greedy answer of libmtmd in-process to each medium, asked as the server renders it."""
    with MtmdSession(pair.model, pair.mmproj) as session:
        answers = []
        for data in media:
            bitmap = session.media(data)
            try:
                prompt = rendered(session, f"{QUESTION}{MARKER}?")
                tokens = session.generate(prompt, [bitmap], N_PREDICT, add_special=False).tokens
            finally:
                session.free([bitmap])
            answers.append(
                session.detokenize([t for t in tokens if not llama_cpp.llama_vocab_is_eog(session.vocab, t)])
            )
        return answers


def driver_answer(pair: Pair, data: bytes, content: str, place: str = "[img]") -> tuple[str, str]:
    """A user turn of `content` as the template renders it (`place` where the medium goes), and
    libmtmd's greedy answer to it with `data` there."""
    with MtmdSession(pair.model, pair.mmproj) as session:
        prompt = rendered(session, content)
        bitmap = session.media(data)
        try:
            tokens = session.generate(
                prompt.replace(place, MARKER), [bitmap], N_PREDICT, add_special=False
            ).tokens
        finally:
            session.free([bitmap])
        eog = llama_cpp.llama_vocab_is_eog
        return prompt, session.detokenize([t for t in tokens if not eog(session.vocab, t)])


def image_part(data: bytes) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()},
    }


def audio_part(data: bytes) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}}


def ask(client: openai.OpenAI, part: dict[str, Any], question: str = QUESTION) -> Any:
    content = [{"type": "text", "text": question}, part, {"type": "text", "text": "?"}]
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], max_tokens=N_PREDICT, temperature=0
    )


def fake_ffmpeg(tmp: Path) -> tuple[Path, Path]:
    """A folder whose ffprobe and ffmpeg only note that they ran (in the file returned)."""
    folder, ran = tmp / "ffbin", tmp / "ffmpeg-ran"
    folder.mkdir()
    for name in ("ffprobe", "ffmpeg"):
        (folder / name).write_text(f"#!/bin/sh\necho {name} >> {ran}\nexit 1\n")
        (folder / name).chmod(0o755)
    return folder, ran


class MediaHost(ThreadingHTTPServer):
    """A web server on 127.0.0.1 answering GET with its `files` (path: bytes, sent with no length, so
    the reader finds their end only by reading) and its `redirects` (path: location)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _MediaHandler)
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, str] = {}
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _MediaHandler(BaseHTTPRequestHandler):
    server: MediaHost

    def do_GET(self) -> None:
        if self.path in self.server.redirects:
            self.send_response(302)
            self.send_header("Location", self.server.redirects[self.path])
            self.end_headers()
        elif self.path in self.server.files:
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(self.server.files[self.path])
        else:
            self.send_error(404)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def media_host() -> Iterator[MediaHost]:
    host = MediaHost()
    thread = threading.Thread(target=host.serve_forever, daemon=True)
    thread.start()
    yield host
    host.shutdown()
    host.server_close()


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The vision server's --media-path (inside a folder whose other files it must not read)."""
    folder = tmp_path_factory.mktemp("media-root") / "media"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory, media_dir: Path) -> Iterator[tuple[Server, Pair, Path]]:
    """The vision pair's server, with an ffprobe on its PATH that notes whether it ran, fetching
    images from 127.0.0.1 (not from localhost) and reading them under `media_dir`."""
    tmp = tmp_path_factory.mktemp("vision")
    pair = build_vision_pair(tmp / "pair")
    limits = ("--max-image-pixels", str(MAX_PIXELS), "--max-media-bytes", str(MAX_BYTES))
    limits += ("--allowed-media-domains", "127.0.0.1", "--media-path", str(media_dir))
    ffbin, ran = fake_ffmpeg(tmp)
    env = {"PATH": f"{ffbin}{os.pathsep}{os.environ['PATH']}"}
    srv = start_server(tmp, str(pair.model), "--mmproj", str(pair.mmproj), *ARGS, *limits, env=env)
    yield srv, pair, ran
    stop_server(srv)


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Pair]]:
    tmp = tmp_path_factory.mktemp("audio")
    pair = build_audio_pair(tmp / "pair")
    srv = start_server(tmp, str(pair.model), "--mmproj", str(pair.mmproj), *ARGS, "--max-audio-seconds", "2")
    yield srv, pair
    stop_server(srv)


@pytest.fixture(scope="module")
def mrope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Pair]]:
    """The M-RoPE pair's server (Qwen2-VL's family: an image's embeddings over fewer positions)."""
    tmp = tmp_path_factory.mktemp("mrope")
    pair = build_mrope_pair(tmp / "pair")
    srv = start_server(tmp, str(pair.model), "--mmproj", str(pair.mmproj), *ARGS)
    yield srv, pair
    stop_server(srv)


def client(srv: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", timeout=120, max_retries=0)


def test_an_image_gets_libmtmds_answer_and_the_model_says_it_reads_images(
    vision: tuple[Server, Pair, Path],
) -> None:
    srv, pair, _ = vision
    data = png(random_pixels(seed=10))
    (want,) = expected(pair, [data])
    reply = ask(client(srv), image_part(data))
    assert reply.choices[0].message.content == want
    content = [{"type": "text", "text": QUESTION}, image_part(data), {"type": "text", "text": "?"}]
    stream = client(srv).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": content}],
        max_tokens=N_PREDICT,
        temperature=0,
        stream=True,
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == want
    # the prompt's positions count the image's 16 embeddings; the encoder's time is in the timings
    assert reply.usage.prompt_tokens > 16
    assert reply.model_extra["timings"]["encode_ms"] > 0
    card = httpx.get(f"{srv.url}/v1/models", timeout=10).json()["data"][0]
    assert "vision" in card["capabilities"] and "audio" not in card["capabilities"]
    overview = httpx.get(f"{srv.url}/console/api/overview", timeout=10).json()
    assert overview["components"][0]["modalities"] == ["text", "vision"]  # the console says so too


def test_four_concurrent_images_each_get_their_alone_answer(vision: tuple[Server, Pair, Path]) -> None:
    srv, pair, _ = vision
    images = [png(random_pixels(seed=20 + i)) for i in range(4)]
    want = expected(pair, images)
    assert len(set(want)) > 1  # the images reach the answers
    c = client(srv)
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda data: ask(c, image_part(data)), images))
    assert [r.choices[0].message.content for r in replies] == want


def test_a_repeated_image_is_a_cache_hit_and_not_encoded_again(vision: tuple[Server, Pair, Path]) -> None:
    srv, _, _ = vision
    data = png(random_pixels(seed=30))
    c = client(srv)
    first = ask(c, image_part(data))
    encoded = srv.metric("llmhost_media_encoded_total")
    assert encoded >= 1
    again = ask(c, image_part(data))
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > 16  # the image's positions were reused
    assert again.model_extra["timings"]["encode_ms"] == 0
    assert srv.metric("llmhost_media_encoded_total") == encoded
    assert srv.metric("llmhost_media_encode_seconds_count") >= 1
    # after other text the image is no shared prefix: decoded again, from its cached embeddings
    hits = srv.metric("llmhost_media_cache_hits_total")
    other = ask(c, image_part(data), question="Describe ")
    assert other.usage.prompt_tokens_details.cached_tokens < 16
    assert other.model_extra["timings"]["encode_ms"] == 0
    assert srv.metric("llmhost_media_cache_hits_total") == hits + 1
    assert srv.metric("llmhost_media_encoded_total") == encoded


def test_an_m_rope_image_gets_libmtmds_answer_and_counts_every_embedding(mrope: tuple[Server, Pair]) -> None:
    """Qwen2-VL's family lays an image's 30 embeddings over 6 positions: the answers are libmtmd's (and
    llama-server's, benchmarks/mtmd_peer_check.py), alone and four at once; the prompt counts (and the
    KV must hold) every embedding, as llama-server counts them; a repeated image is a cache hit."""
    srv, pair = mrope
    images = [png(random_pixels(seed=40 + i)) for i in range(4)]
    want = expected(pair, images)
    assert len(set(want)) > 1
    c = client(srv)
    alone = ask(c, image_part(images[0]))
    assert alone.choices[0].message.content == want[0]
    with MtmdSession(pair.model, pair.mmproj) as session:
        bitmap = session.media(images[0])
        try:
            run = session.generate(rendered(session, f"{QUESTION}{MARKER}?"), [bitmap], 1, add_special=False)
        finally:
            session.free([bitmap])
    assert [(c.kind, c.n_tokens, c.n_pos) for c in run.chunks][1] == ("image", 30, 6)
    assert alone.usage.prompt_tokens == sum(c.n_tokens for c in run.chunks)
    # asked again at once (another prompt in between may take its slot: the prompt is too short to be
    # worth restoring from the host tier), all but the last of its 46 tokens are reused
    again = ask(c, image_part(images[0]))
    assert again.choices[0].message.content == want[0]
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    assert again.model_extra["timings"]["encode_ms"] == 0
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda data: ask(c, image_part(data)), images))
    assert [r.choices[0].message.content for r in replies] == want
    # within max_total_tokens by positions, past it by the cells its embeddings fill: refused up front
    big = png(random_pixels(height=200, width=200, seed=49))  # 25x25 embeddings over 25 positions
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        content = [{"type": "text", "text": QUESTION}, image_part(big), {"type": "text", "text": "?"}]
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": content}], max_tokens=1900)
    assert refused.value.body["param"] == "max_tokens"
    assert "641 tokens + max_tokens 1900" in refused.value.message  # 41 positions, 641 embeddings
    assert ask(c, image_part(images[1])).choices[0].message.content == want[1]


def test_what_cannot_be_used_is_a_400_naming_the_part(vision: tuple[Server, Pair, Path]) -> None:
    srv, _, ffmpeg_ran = vision
    c = client(srv)
    field = "messages[0].content[1].image_url.url"
    cases = [
        ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}, "not fetched"),
        (image_part(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 8), "could not be decoded"),
        (image_part(b"plain text, no image"), "no image or audio format"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "base64"),
        (audio_part(wav(tone(seconds=0.1))), "takes no audio"),
        (image_part(png(random_pixels(64, 64))), f"more than --max-media-bytes {MAX_BYTES}"),
        (
            image_part(png(np.zeros((64, 64, 3), np.uint8))),
            f"4096 pixels, more than --max-image-pixels {MAX_PIXELS}",
        ),
    ]
    for part, says in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            ask(c, part)
        error = caught.value.body
        named = field if part["type"] == "image_url" else "messages[0].content[1].input_audio.data"
        assert error["param"] == named and says in error["message"], error
    # libmtmd's helper hands what stb_image cannot decode to ffprobe: never a request's bytes here
    assert not ffmpeg_ran.exists()
    # unharmed
    assert ask(c, image_part(png(random_pixels(seed=40)))).choices[0].finish_reason in ("stop", "length")


def test_messages_and_responses_images_get_the_chat_routes_answer(vision: tuple[Server, Pair, Path]) -> None:
    srv, pair, _ = vision
    data = png(random_pixels(seed=50))
    (want,) = expected(pair, [data])
    assert ask(client(srv), image_part(data)).choices[0].message.content == want
    b64 = base64.b64encode(data).decode()
    claude = anthropic.Anthropic(base_url=srv.url, api_key="x", timeout=120, max_retries=0)
    image: Any = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
    content: Any = [{"type": "text", "text": QUESTION}, image, {"type": "text", "text": "?"}]
    asked: Any = [{"role": "user", "content": content}]
    greedy = {"temperature": 0}  # this client version has no temperature argument
    message = claude.messages.create(model="m", max_tokens=N_PREDICT, messages=asked, extra_body=greedy)
    assert "".join(b.text for b in message.content if b.type == "text") == want
    # the count is the prompt the answer was given: the image's 16 positions included
    counted = claude.messages.count_tokens(model="m", messages=asked).input_tokens
    assert counted == message.usage.input_tokens > 16
    parts: Any = [
        {"type": "input_text", "text": QUESTION},
        {"type": "input_image", "image_url": f"data:image/png;base64,{b64}", "detail": "auto"},
        {"type": "input_text", "text": "?"},
    ]
    responded = client(srv).responses.create(
        model="m", input=[{"role": "user", "content": parts}], max_output_tokens=N_PREDICT, temperature=0
    )
    assert responded.output_text == want


def test_messages_and_responses_refusals_name_their_fields(vision: tuple[Server, Pair, Path]) -> None:
    srv, _, _ = vision
    claude = anthropic.Anthropic(base_url=srv.url, api_key="x", timeout=120, max_retries=0)
    sources: list[tuple[dict[str, Any], str, str]] = [
        ({"type": "url", "url": "https://example.com/cat.png"}, "source.url", "not fetched"),
        ({"type": "base64", "media_type": "image/png", "data": "@@@"}, "source.data", "base64"),
        (
            {"type": "base64", "media_type": "image/png", "data": base64.b64encode(b"no image").decode()},
            "source.data",
            "no image or audio format",
        ),
    ]
    for source, field, says in sources:
        content: Any = [{"type": "text", "text": QUESTION}, {"type": "image", "source": source}]
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": content}])
        body: Any = refused.value.body
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert body["error"]["field"] == f"messages.0.content.1.{field}" and says in body["error"]["message"]
    images: list[tuple[dict[str, Any], str, str]] = [
        ({"image_url": "https://example.com/cat.png"}, "image_url", "not fetched"),
        ({"file_id": "file-abc"}, "file_id", "llmhost keeps no files"),
    ]
    for image, field, says in images:
        parts: Any = [
            {"type": "input_text", "text": QUESTION},
            {"type": "input_image", "detail": "auto", **image},
        ]
        with pytest.raises(openai.BadRequestError) as caught:
            client(srv).responses.create(
                model="m", input=[{"role": "user", "content": parts}], max_output_tokens=4
            )
        error: Any = caught.value.body
        assert error["param"] == f"input.0.content.1.{field}" and says in error["message"], error


def url_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def test_an_image_url_on_a_listed_host_or_under_the_media_path_is_read(
    vision: tuple[Server, Pair, Path], media_host: MediaHost, media_dir: Path
) -> None:
    srv, pair, _ = vision
    data = png(random_pixels(seed=50))
    (want,) = expected(pair, [data])
    media_host.files["/cat.png"] = data
    media_host.redirects["/hop"] = f"{media_host.url}/cat.png"
    (media_dir / "cat.png").write_bytes(data)
    c = client(srv)
    for url in (f"{media_host.url}/cat.png", f"{media_host.url}/hop", "file://cat.png"):
        assert ask(c, url_part(url)).choices[0].message.content == want, url


def test_an_image_url_the_operator_did_not_allow_is_a_400_naming_the_part(
    vision: tuple[Server, Pair, Path], media_host: MediaHost, media_dir: Path
) -> None:
    srv, _, _ = vision
    unlisted = media_host.url.replace("127.0.0.1", "localhost")
    media_host.files["/ok.png"] = png(random_pixels(seed=51))
    media_host.files["/big.png"] = png(random_pixels(64, 64))  # more than MAX_BYTES
    media_host.redirects["/away"] = f"{unlisted}/ok.png"
    outside = media_dir.parent / "secret.png"
    outside.write_bytes(png(random_pixels(seed=52)))
    (media_dir / "link.png").symlink_to(outside)
    cases = [
        (f"{unlisted}/ok.png", "not fetched from localhost"),
        (f"{media_host.url}/away", "not fetched from localhost"),
        (f"{media_host.url}/big.png", f"more than --max-media-bytes {MAX_BYTES}"),
        (f"{media_host.url}/none.png", "answered HTTP 404"),
        ("file://../secret.png", "outside --media-path"),
        ("file://link.png", "outside --media-path"),
        ("file://none.png", "names no file"),
    ]
    c = client(srv)
    for url, says in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            ask(c, url_part(url))
        error = caught.value.body
        assert error["param"] == "messages[0].content[1].image_url.url", (url, error)
        assert says in error["message"], (url, error)


def test_a_clip_of_audio_gets_libmtmds_answer(audio: tuple[Server, Pair]) -> None:
    srv, pair = audio
    data = wav(tone(hz=660.0))
    (want,) = expected(pair, [data])
    reply = ask(client(srv), audio_part(data))
    assert reply.choices[0].message.content == want
    assert reply.usage.prompt_tokens > 750  # one 30 s window's embeddings
    card = httpx.get(f"{srv.url}/v1/models", timeout=10).json()["data"][0]
    assert "audio" in card["capabilities"]
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client(srv), audio_part(wav(tone(seconds=3.0))))
    assert caught.value.body["param"] == "messages[0].content[1].input_audio.data"
    assert "3.0 s, more than --max-audio-seconds 2" in caught.value.body["message"]


def chat_answer(srv: Server, data: bytes, task: str) -> str:
    """What the chat route answers for `data` and the instruction the audio routes render for `task`."""
    text = instruction("translate" if task == "translate" else "transcribe", None, None)
    reply = client(srv).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": [{"type": "text", "text": text}, audio_part(data)]}],
        temperature=0,
    )
    return (reply.choices[0].message.content or "").strip()


def test_a_clip_is_transcribed_and_translated_as_the_chat_route_answers(audio: tuple[Server, Pair]) -> None:
    srv, _ = audio
    c, data = client(srv), wav(tone(hz=550.0, seconds=1.5))
    said = chat_answer(srv, data, "transcribe")
    assert said  # the tiny model's words are noise, but some
    assert c.audio.transcriptions.create(file=("clip.wav", data), model="m", response_format="text") == said
    verbose = c.audio.transcriptions.create(
        file=("clip.wav", data), model="m", response_format="verbose_json"
    )
    assert (verbose.text, verbose.task, verbose.duration) == (said, "transcribe", 1.5)
    assert [(s.start, s.end, s.text) for s in verbose.segments or []] == [(0.0, 1.5, said)]
    translated = c.audio.translations.create(file=("clip.wav", data), model="m")
    assert translated.text == chat_answer(srv, data, "translate")
    usage = translated.model_extra["usage"]
    assert usage["type"] == "tokens" and usage["input_tokens"] > 750 and usage["output_tokens"] > 0


def streamed(stream: Any) -> tuple[list[str], Any]:
    """The deltas of a streamed transcription and its done event (the last)."""
    events = list(stream)
    assert [e.type for e in events[:-1]] == ["transcript.text.delta"] * (len(events) - 1)
    assert events[-1].type == "transcript.text.done"
    return [e.delta for e in events[:-1]], events[-1]


def test_a_streamed_transcription_is_the_unstreamed_text(audio: tuple[Server, Pair]) -> None:
    srv, _ = audio
    c, clip = client(srv), ("clip.wav", wav(tone(hz=550.0, seconds=1.5)))
    whole = c.audio.transcriptions.create(file=clip, model="m")
    deltas, done = streamed(c.audio.transcriptions.create(file=clip, model="m", stream=True))
    assert len(deltas) > 1 and "".join(deltas) == done.text == whole.text, "greedy: the same text, in pieces"
    assert done.usage is not None and whole.usage is not None
    assert done.usage.model_dump(exclude_none=True) == whole.usage.model_dump(exclude_none=True)


def test_a_client_gone_mid_transcription_frees_the_sequence(audio: tuple[Server, Pair]) -> None:
    srv, _ = audio
    form = {"model": "m", "stream": "true"}
    files = {"file": ("clip.wav", wav(tone(hz=550.0, seconds=1.5)))}
    with httpx.stream("POST", f"{srv.url}/v1/audio/transcriptions", data=form, files=files, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()  # keep the iterator: abandoning it closes the connection
        seen = 0
        while seen < 3:
            seen += next(lines).startswith("data: ")
        assert srv.metric("llmhost_num_requests_running") == 1
        generated_before = srv.metric("llmhost_generation_tokens_total")
    deadline = time.monotonic() + 5
    while srv.metric("llmhost_num_requests_running") > 0:
        assert time.monotonic() < deadline, "the abandoned transcription still runs"
        time.sleep(0.05)
    # the tiny model talks on to --max-total-tokens: about 1,280 tokens after this clip's 767
    aborted_after = srv.metric("llmhost_generation_tokens_total") - generated_before
    assert aborted_after < 1000


def test_what_the_audio_routes_cannot_use_is_a_4xx_naming_the_field(
    audio: tuple[Server, Pair], vision: tuple[Server, Pair, Path], server: Server
) -> None:
    clip = ("clip.wav", wav(tone(seconds=0.2)))
    c = client(audio[0])
    with pytest.raises(openai.BadRequestError) as caught:
        c.audio.transcriptions.create(file=clip, model="m", response_format="srt")
    assert caught.value.body["param"] == "response_format"
    assert "json, text, verbose_json" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        c.audio.transcriptions.create(file=clip, model="m", response_format="verbose_json", stream=True)
    assert caught.value.body["param"] == "response_format"
    assert "verbose_json does not stream" in caught.value.body["message"]
    for path, stream, says in (
        ("translations", "true", "a translation does not stream"),  # as OpenAI's: no stream field
        ("transcriptions", "yes", "stream must be true or false"),
    ):
        refused = httpx.post(
            f"{audio[0].url}/v1/audio/{path}", data={"model": "m", "stream": stream}, files={"file": clip}
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "stream" and says in refused.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        c.audio.transcriptions.create(file=("long.wav", wav(tone(seconds=3.0))), model="m")
    assert caught.value.body["param"] == "file"
    assert "3.0 s, more than --max-audio-seconds 2" in caught.value.body["message"]
    for srv in (vision[0], server):
        with pytest.raises(openai.BadRequestError) as caught:
            client(srv).audio.translations.create(file=clip, model="m")
        assert caught.value.body["param"] == "file"
        assert "does not hear audio" in caught.value.body["message"]
    with pytest.raises(openai.APIStatusError) as too_big:
        client(vision[0]).audio.transcriptions.create(file=("big.wav", wav(tone(seconds=1.0))), model="m")
    assert too_big.value.status_code == 413
    assert too_big.value.body["param"] == "file" and too_big.value.body["limit"] == MAX_BYTES


def test_a_text_model_refuses_an_image(server: Server) -> None:
    c = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", timeout=60, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        ask(c, image_part(png(random_pixels())))
    error = caught.value.body
    assert error["param"] == "messages[0].content[1].image_url.url"
    assert "text only" in error["message"]


def test_a_projector_that_is_not_one_is_refused_at_start(
    tmp_path: Path, vision: tuple[Server, Pair, Path]
) -> None:
    _, pair, _ = vision
    with pytest.raises(RuntimeError) as caught:
        start_server(tmp_path, str(pair.model), "--mmproj", str(pair.model), *ARGS)
    assert f"--mmproj {pair.model} is not a multimodal projector" in str(caught.value)


@pytest.mark.parametrize("kind", ["vision", "mrope"])
def test_an_image_prompt_evicted_to_host_memory_comes_back_with_its_image(
    kind: str, vision: tuple[Server, Pair, Path], mrope: tuple[Server, Pair]
) -> None:
    """In the engine: one sequence and no extra cached stream, so another prompt evicts the first to the
    host-memory tier, whose state (keyed by the image's ids too) serves it again, image included; under
    M-RoPE too, whose image cells sit at fewer positions than the prompt gives it."""
    pair = vision[1] if kind == "vision" else mrope[1]
    config = EngineConfig(
        mmproj=str(pair.mmproj),
        max_concurrent=1,
        prefix_cache_seqs=0,
        prompt_cache_mb=64,
        max_total_tokens=2048,
        max_input_tokens=1536,
        max_batch_tokens=1024,
        n_threads=1,
    )
    model = LlamaModel(pair.model, config)
    projector = model.projector
    assert projector is not None
    engine = Engine(model, model.config)
    try:

        def prompt(seed: int, text: str) -> tuple[list[int], tuple[MediaSpan, ...]]:
            data = png(random_pixels(seed=seed))
            medium = MediaInput(data, "image", hashlib.sha256(data).hexdigest())
            return projector.tokenize(turn(f"{text} {MARKER}?"), [medium], MediaLimits(), True)

        def run(rid: str, tokens: list[int], spans: tuple[MediaSpan, ...]) -> tuple[list[int], Timings]:
            engine.add(
                GenerationRequest(
                    rid, tokens, SamplingParams(max_tokens=N_PREDICT, temperature=0.0), media=spans
                )
            )
            out: list[int] = []
            timings = None
            while engine.has_work:
                for event in engine.step():
                    assert event.error is None, event.error
                    out += event.token_ids
                    timings = event.timings or timings
            assert timings is not None
            return out, timings

        first = prompt(50, "A long question about this picture, " * 3)
        answer, _ = run("a", *first)
        run("b", *prompt(51, "Something else entirely, " * 3))
        again, timings = run("c", *first)
        assert again == answer
        assert timings.cache_n > first[1][0].end and timings.encode_ms == 0
        stats = engine.stats()
        assert stats.prompt_cache_hits == 1 and stats.media_encoded == 2
    finally:
        engine.close()


def test_memory_mb_with_a_projector_counts_its_share_in_the_start_fit(
    vision: tuple[Server, Pair, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """In the engine: --memory-mb's fit beside a projector counts its share (its weights, encoder and
    media embeddings: about 80 MiB) among what the KV cache's streams must leave room for, and states
    it in the start log. How many fewer streams that leaves is the fit's arithmetic
    (tests/unit/test_projector_memory.py): here the process's own size, which other loads in this test
    process change between a measure and the fit's, would make a count flaky."""
    _, pair, _ = vision
    share = projector_memory(pair.mmproj).total_bytes

    def fitted(mmproj: str) -> tuple[int, str]:
        caplog.clear()
        shape = EngineConfig(
            mmproj=mmproj,
            max_concurrent=1,
            prefix_cache_seqs=100,
            prompt_cache_mb=0,
            max_total_tokens=2048,
            max_input_tokens=1536,
            max_batch_tokens=1024,
            n_threads=1,
        )
        n_vocab = check_file(pair.model).metadata["tokenizer.ggml.tokens"]
        assert isinstance(n_vocab, int)
        beside = rss_bytes() + pair.model.stat().st_size + share + prompt_logits_bytes(shape, n_vocab)
        memory_mb = beside // 2**20 + RUNTIME_MARGIN_MB + 60  # room for the process to grow meanwhile
        config = dataclasses.replace(shape, memory_mb=memory_mb)
        with caplog.at_level(logging.INFO, logger="llmhost.engine.kv.memory_fit"):
            model = LlamaModel(pair.model, config)
        model.close()
        [line] = [r.getMessage() for r in caplog.records if ": process " in r.getMessage()]
        return memory_mb, line

    for mmproj in ("", str(pair.mmproj)):
        memory_mb, said = fitted(mmproj)
        total = re.search(r" = (\d+) MiB$", said)
        assert total is not None and int(total.group(1)) <= memory_mb, said
        if mmproj:
            named = f"projector {share / 2**20:.0f} MiB (weights 0 + encoder 16 + media embeddings cache 64)"
            assert named in said
        else:
            assert "projector" not in said


def test_an_endpoints_router_routes_the_audio_routes_by_the_forms_model(
    audio: tuple[Server, Pair], tmp_path_factory: pytest.TempPathFactory
) -> None:
    # two components on the same tiny model, one with the projector: the form's `model` picks the copy
    srv, pair = audio
    engine = "max_concurrent: 2, max_input_tokens: 1536, max_total_tokens: 2048, max_batch_tokens: 1024"
    ep = start_endpoint(
        tmp_path_factory.mktemp("audio-endpoint"),
        f"""
name: audio
components:
  - name: hear
    model: {pair.model}
    resources: {{num_cpus: 0.5, memory_mb: 400}}
    engine: {{{engine}, mmproj: {pair.mmproj}}}
  - name: deaf
    model: {pair.model}
    resources: {{num_cpus: 0.5, memory_mb: 400}}
    engine: {{{engine}}}
""",
    )
    try:
        routed = openai.OpenAI(base_url=f"{ep.url}/v1", api_key="x", timeout=180, max_retries=0)
        data = wav(tone(hz=550.0, seconds=1.5))
        clip = ("clip.wav", data)
        said = routed.audio.transcriptions.create(file=clip, model="hear", response_format="text")
        assert said == chat_answer(srv, data, "transcribe"), "the copy of `hear` answered, as serve does"
        # a streamed form comes back as the copy's events (the router relays any SSE answer as it comes)
        stream = routed.audio.transcriptions.create(
            file=clip, model="hear", response_format="text", stream=True
        )
        deltas, done = streamed(stream)
        assert len(deltas) > 1 and "".join(deltas) == done.text == said
        with pytest.raises(openai.BadRequestError) as deaf:
            routed.audio.transcriptions.create(file=clip, model="deaf")
        assert deaf.value.body["param"] == "file", "the copy of `deaf` answered: it does not hear"
        with pytest.raises(openai.NotFoundError) as unknown:
            routed.audio.translations.create(file=clip, model="nobody")
        assert unknown.value.body["param"] == "model"
        overview = httpx.get(f"{ep.url}/console/api/overview", timeout=30).json()
        takes = {c["name"]: c["modalities"] for c in overview["components"]}
        assert takes == {"hear": ["text", "audio"], "deaf": ["text"]}, "as each copy's /v1/models says"
    finally:
        stop_endpoint(ep)


def ollama_client(srv: Server) -> tuple[ollama.Client, str]:
    """Ollama's client on `srv`, and the name it lists the model under."""
    c = ollama.Client(host=srv.url, timeout=120)
    return c, c.list().models[0].model or ""


# greedy, without Ollama's default repeat penalty (1.1), as the OpenAI route samples
GREEDY = {"num_predict": N_PREDICT, "temperature": 0, "repeat_penalty": 1.0}


def test_ollamas_images_get_the_chat_routes_answer_and_show_says_vision(
    tmp_path: Path, vision: tuple[Server, Pair, Path]
) -> None:
    """Ollama puts a message's images before its text: the OpenAI route's answer to the same order."""
    srv, pair, _ = vision
    data = png(random_pixels(seed=60))
    content = [image_part(data), {"type": "text", "text": "What is this?"}]
    want = client(srv).chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], max_tokens=N_PREDICT, temperature=0
    )
    c, model = ollama_client(srv)
    path = tmp_path / "picture.png"
    path.write_bytes(data)
    for image in (data, path):
        message = {"role": "user", "content": "What is this?", "images": [image]}
        reply = c.chat(model=model, messages=[message], options=GREEDY)
        assert reply.message.content == want.choices[0].message.content
    generated = c.generate(model=model, prompt="What is this?", images=[path], options=GREEDY)
    assert generated.response == want.choices[0].message.content
    assert generated.context is None  # a prompt with images is no context to continue
    # raw: the prompt as the template renders it (its BOS too), its image placed with Ollama's [img]
    prompt, answer = driver_answer(pair, data, "[img]What is this?")
    assert answer == want.choices[0].message.content
    raw = c.generate(model=model, prompt=prompt, images=[data], raw=True, options=GREEDY)
    assert raw.response == answer
    capabilities = c.show(model).capabilities or []
    assert "vision" in capabilities and "audio" not in capabilities


def test_ollamas_images_that_cannot_be_used_are_400s_naming_the_image(
    vision: tuple[Server, Pair, Path],
) -> None:
    srv, _, _ = vision
    _, model = ollama_client(srv)
    image = base64.b64encode(png(random_pixels(seed=61))).decode()
    ask_chat = {"model": model, "stream": False, "options": GREEDY}
    cases: list[tuple[str, dict[str, Any], str, str]] = [
        (
            "chat",
            {"messages": [{"role": "user", "content": "hi", "images": [image, "@@@"]}]},
            "messages[0].images[1]",
            "base64",
        ),
        (
            "chat",
            {"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]},
            "messages[0].images[0]",
            "no image or audio format",
        ),
        (
            "generate",
            {"prompt": "[img] and [img]", "raw": True, "images": [image]},
            "images",
            "2 media markers",
        ),
        ("generate", {"prompt": "hi", "context": [1, 2], "images": [image]}, "context", "images"),
    ]
    for route, extra, field, says in cases:
        r = httpx.post(f"{srv.url}/api/{route}", json={**ask_chat, **extra}, timeout=60)
        assert r.status_code == 400 and r.json()["field"] == field and says in r.json()["error"], r.text


def test_ollama_sends_audio_as_images(audio: tuple[Server, Pair]) -> None:
    srv, _ = audio
    data = wav(tone(hz=440.0))
    content = [audio_part(data), {"type": "text", "text": "What is this?"}]
    want = client(srv).chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], max_tokens=N_PREDICT, temperature=0
    )
    c, model = ollama_client(srv)
    reply = c.chat(
        model=model, messages=[{"role": "user", "content": "What is this?", "images": [data]}], options=GREEDY
    )
    assert reply.message.content == want.choices[0].message.content
    assert "audio" in (c.show(model).capabilities or [])


def test_a_text_model_refuses_ollamas_image(server: Server) -> None:
    c, model = ollama_client(server)
    with pytest.raises(ollama.ResponseError) as caught:
        c.chat(model=model, messages=[{"role": "user", "content": "hi", "images": [png(random_pixels())]}])
    assert caught.value.status_code == 400 and "text only" in caught.value.error


def test_tgi_and_invocations_take_llama_servers_multimodal_data(vision: tuple[Server, Pair, Path]) -> None:
    """`inputs` as llama-server's prompt object: each of `multimodal_data` takes a marker's place, in
    order, in the raw prompt; the answer is libmtmd's to the same prompt."""
    srv, pair, _ = vision
    data = png(random_pixels(seed=70))
    prompt, answer = driver_answer(pair, data, f"{QUESTION}{MARKER}?", place=MARKER)
    encoded = base64.b64encode(data).decode()
    body = {
        "inputs": {"prompt_string": prompt, "multimodal_data": [encoded]},
        "parameters": {"max_new_tokens": N_PREDICT},
    }
    generated = httpx.post(f"{srv.url}/generate", json=body, timeout=60)
    assert generated.status_code == 200 and generated.json()["generated_text"] == answer, generated.text
    invoked = httpx.post(f"{srv.url}/invocations", json=body, timeout=60)
    assert invoked.status_code == 200 and invoked.json()[0]["generated_text"] == answer, invoked.text
    cases = [
        (
            {"prompt_string": f"{MARKER}{prompt}", "multimodal_data": [encoded]},
            "inputs.multimodal_data",
            "2 media",
        ),
        ({"prompt_string": prompt, "multimodal_data": ["@@@"]}, "inputs.multimodal_data[0]", "base64"),
    ]
    for inputs, field, says in cases:
        r = httpx.post(f"{srv.url}/generate", json={**body, "inputs": inputs}, timeout=60)
        assert r.status_code == 400 and r.json()["field"] == field and says in r.json()["error"], r.text


def test_bench_images_reach_the_encoder_and_report_its_time(
    vision: tuple[Server, Pair, Path], tmp_path: Path
) -> None:
    """`llmhost bench run --images 2` against the vision server: every request carries its two images
    (their positions in the prompt tokens), the encode time comes back per request and from /metrics;
    with --repeat-images the server encodes nothing after the warm-up; Messages and TGI carry them too."""
    srv, _, _ = vision
    # 40x40 keeps each image under the server's MAX_PIXELS; distinct seeds from the other tests' images
    common = {"url": srv.url, "requests": 4, "prompt_tokens": 8, "max_new_tokens": 2, "num_prompts": 4}
    common |= {"images": 2, "image_size": (40, 40), "seed": 90, "metrics_interval_s": 0.0}
    (lv,) = run_benchmark(BenchConfig(api="chat", concurrency=[2], **common), tmp_path).levels()
    assert lv.successes == 4 and lv.images == 8, lv.errors
    assert lv.input_tokens >= 4 * (2 * IMAGE_TOKENS + 8)
    assert lv.distributions["encode_ms_p50"] and lv.distributions["encode_ms_p50"] > 0
    assert lv.server_figures["server_media_encode_ms_mean"] > 0
    saved = json.loads((tmp_path / "summary.json").read_text())["configs"][0]
    assert saved["workload"]["images_per_request"] == 2 and saved["workload"]["image_size"] == "40x40"
    (repeat,) = run_benchmark(BenchConfig(api="chat", warmup=1, repeat_images=True, **common)).levels()
    assert repeat.successes == 4 and repeat.distributions["encode_ms_p50"] == 0
    assert repeat.server_metrics["counters"].get("llmhost_media_encoded_total", 0) == 0
    for seed, api in enumerate(("messages", "tgi"), 91):  # images not sent yet, so each is encoded
        (other,) = run_benchmark(BenchConfig(api=api, **common | {"requests": 2, "seed": seed})).levels()
        assert other.successes == 2 and other.images == 4, (api, other.errors)
        assert other.server_metrics["counters"]["llmhost_media_encoded_total"] == 4
