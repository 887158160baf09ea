"""A streamed transcription's events: the deltas add up to the unstreamed text (its strip()), the done
event carries it and the usage, and a failed generation ends the stream with OpenAI's error event."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from llmhost.engine import FinishReason, GenerationEvent
from llmhost.server.serving.apis.transcript_events import Trimmed, transcript_events


def test_the_pieces_add_up_to_the_stripped_whole() -> None:
    pieces = ["  \n", " Hello", " ", "world", " \n", " ", "again ", "\n"]
    trimmed = Trimmed()
    sent = [trimmed.feed(p) for p in pieces]
    whole = "".join(pieces).strip()
    assert "".join(sent) == trimmed.text == whole == "Hello world \n again"
    # whitespace waits for the text after it; the end's is never sent
    assert sent == ["", "Hello", "", " world", "", "", " \n again", ""]


async def _events(*events: GenerationEvent) -> AsyncIterator[GenerationEvent]:
    for event in events:
        yield event


def _lines(*events: GenerationEvent) -> tuple[list[object], list[GenerationEvent]]:
    told: list[GenerationEvent] = []

    async def run() -> list[str]:
        return [line async for line in transcript_events(_events(*events), lambda e: e.text, told.append)]

    lines = asyncio.run(run())
    assert all(line.startswith("data: ") and line.endswith("\n\n") for line in lines)
    return [json.loads(line[len("data: ") :]) for line in lines], told


def test_deltas_then_done_with_the_text_and_usage() -> None:
    last = GenerationEvent(
        "r", [3], " \n", finish_reason=FinishReason.EOS, prompt_tokens=770, completion_tokens=3
    )
    bodies, told = _lines(GenerationEvent("r", [1], " Hi"), GenerationEvent("r", [2], " there"), last)
    usage = {"type": "tokens", "input_tokens": 770, "output_tokens": 3, "total_tokens": 773}
    assert bodies == [
        {"type": "transcript.text.delta", "delta": "Hi"},
        {"type": "transcript.text.delta", "delta": " there"},
        {"type": "transcript.text.done", "text": "Hi there", "usage": usage},
    ]
    assert told == [last]


def test_a_failed_generation_ends_with_openais_error_event() -> None:
    failed = GenerationEvent("r", [], "", finish_reason=FinishReason.TIMEOUT, error="request deadline passed")
    bodies, told = _lines(GenerationEvent("r", [1], "Hi"), failed)
    assert bodies[0] == {"type": "transcript.text.delta", "delta": "Hi"}
    assert bodies[1] == {
        "error": {"message": "request deadline passed", "type": "timeout", "param": None, "code": 503}
    }
    assert told == [], "a failure is not counted as a finished transcription"
