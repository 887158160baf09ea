"""`bench run --images N`: the generated images, the requests that carry them in each API's words, the
APIs that refuse them, and the encode time read from the answers and /metrics."""

from __future__ import annotations

import base64
import json

import pytest

from llmhost.bench.config import BenchConfig
from llmhost.bench.figures.metrics import RequestRecord, summarize_level
from llmhost.bench.load.http import Endpoint
from llmhost.bench.load.images import ImageSettings, parse_image_size
from llmhost.bench.load.server_metrics import derive
from llmhost.bench.load.targets import OpenAIStream, Target, TGIStream
from llmhost.bench.load.workload import METHOD_APPROX, Prompt, Workload
from llmhost.bench.runner import prepare_requests


def _png_size(b64: str) -> tuple[int, int]:
    raw = base64.b64decode(b64)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR"
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


def test_images_are_pngs_of_the_size_distinct_per_request_unless_repeated() -> None:
    distinct = ImageSettings(2, (40, 24), seed=3)
    first, second = distinct.for_request(0), distinct.for_request(1)
    assert len(first) == 2 and all(_png_size(b) == (40, 24) for b in first)
    assert len({*first, *second}) == 4
    assert distinct.for_request(0) == first  # seeded: the same workload on every run
    repeated = ImageSettings(2, (40, 24), repeat=True, seed=3)
    assert repeated.for_request(0) == repeated.for_request(5)
    # flat tiles keep a Gemma 3 sized image far under a server's 4 MiB a medium
    assert len(base64.b64decode(ImageSettings(1).for_request(0)[0])) < 1 << 20


def test_image_size_option() -> None:
    assert parse_image_size("896x448") == (896, 448)
    for bad in ("896", "0x10", "axb"):
        with pytest.raises(ValueError, match="--image-size"):
            parse_image_size(bad)


def test_each_api_carries_the_images_before_the_text() -> None:
    images = ["QUFB", "QkJC"]
    chat = Target("chat", model="m").body("hi", 4, images)
    parts = chat["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[1]["image_url"]["url"] == "data:image/png;base64,QkJC" and parts[2]["text"] == "hi"
    messages = Target("messages").body("hi", 4, images)["messages"][0]["content"]
    assert messages[0] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "QUFB"},
    }
    assert messages[2] == {"type": "text", "text": "hi"}
    responses = Target("responses").body("hi", 4, images)["input"][0]
    assert responses["role"] == "user"
    assert responses["content"][0] == {"type": "input_image", "image_url": "data:image/png;base64,QUFB"}
    assert responses["content"][2] == {"type": "input_text", "text": "hi"}
    for api in ("tgi", "sagemaker"):
        inputs = Target(api).body("hi", 4, images)["inputs"]
        assert inputs == {"prompt_string": "<__media__><__media__>hi", "multimodal_data": images}
    assert Target("chat").body("hi", 4)["messages"] == [{"role": "user", "content": "hi"}]


def test_an_api_without_images_refuses_them() -> None:
    with pytest.raises(ValueError, match="--images: the openai API"):
        Target("openai").body("hi", 4, ["QUFB"])
    with pytest.raises(ValueError, match="--images: the openai API takes no images"):
        BenchConfig(url="http://x", api="openai", images=1).validate()
    with pytest.raises(ValueError, match="--images applies to the prompts workload"):
        BenchConfig(url="http://x", api="chat", images=1, workload="conversations").validate()
    with pytest.raises(ValueError, match="--images"):
        BenchConfig(url="http://x", api="chat", images=-1).validate()
    BenchConfig(url="http://x", api="chat", images=2, image_size=(64, 64)).validate()


def test_prepared_requests_carry_their_prompts_images() -> None:
    workload = Workload([Prompt("a", 1, False), Prompt("b", 1, False)], "synthetic", METHOD_APPROX)
    settings = ImageSettings(1, (16, 16))
    prepared = prepare_requests(Endpoint.parse("http://127.0.0.1:9"), Target("chat"), workload, 4, settings)
    assert [p.images for p in prepared] == [1, 1]
    bodies = [json.loads(p.http.body or b"") for p in prepared]
    urls = [b["messages"][0]["content"][0]["image_url"]["url"] for b in bodies]
    assert urls == [f"data:image/png;base64,{settings.for_request(i)[0]}" for i in (0, 1)]


def test_encode_time_from_the_streams_and_its_figures() -> None:
    chat = OpenAIStream(chat=True)
    chunk = {
        "choices": [{"delta": {"content": "x"}, "finish_reason": "length"}],
        "timings": {"encode_ms": 12.5},
    }
    chat.feed(json.dumps(chunk).encode())
    assert chat.encode_ms == 12.5
    tgi = TGIStream()
    details = {"generated_tokens": 1, "timings": {"encode_ms": 7}}
    tgi.feed(json.dumps({"token": {"text": "x"}, "generated_text": "x", "details": details}).encode())
    assert tgi.encode_ms == 7.0
    records = []
    for i, ms in enumerate((10.0, 30.0, 20.0)):
        rec = RequestRecord("c", "c=1", 0, 0.0, False, images=2, encode_ms=ms)
        rec.finish_ok([0.1 * (i + 1)], 0.5, 1)
        records.append(rec)
    level = summarize_level(
        records,
        config="c",
        level="c=1",
        mode="closed",
        concurrency=1,
        rate_rps=None,
        wall_s=1.0,
        price_per_hour=None,
    )
    assert level.images == 6 and level.get("encode_ms_p50") == 20.0
    text_only = RequestRecord("c", "c=1", 0, 0.0, False, encode_ms=0.0)
    text_only.finish_ok([0.1], 0.5, 1)
    kw = {"config": "c", "level": "c=1", "mode": "closed", "concurrency": 1, "rate_rps": None, "wall_s": 1.0}
    assert summarize_level([text_only], price_per_hour=None, **kw).get("encode_ms_p50") is None


def test_server_encode_figures_from_metrics() -> None:
    delta = {
        "llmhost_media_encode_seconds_sum": 0.3,
        "llmhost_media_encode_seconds_count": 3.0,
        "llmhost_media_encoded_total": 3.0,
        "llmhost_media_cache_hits_total": 1.0,
    }
    figures = derive(delta, [])
    assert figures["server_media_encode_ms_mean"] == pytest.approx(100.0)
    assert figures["server_media_cache_hit_rate"] == 0.25
    assert "server_media_encode_ms_mean" not in derive({}, [])
