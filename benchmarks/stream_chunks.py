"""What typing the per-token stream path costs: building N `chat.completion.chunk`s (one content token
each, as the chat stream sends them) as a pydantic model written with `model_dump_json`, against the
TypedDict of llmhost.server.protocol.shapes written with `json.dumps` (what the serving layer does: at
run time a TypedDict is the plain dict llmhost built before it was typed). Best of --repeat runs of
each, interleaved.

    .venv/bin/python benchmarks/stream_chunks.py             # 10,000 chunks, best of 7
    .venv/bin/python benchmarks/stream_chunks.py --chunks 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import time
import timeit
from typing import Literal

from pydantic import BaseModel, ConfigDict

from llmhost.server.protocol.shapes import Chunk, ChunkChoice, Delta


class DeltaModel(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str | None = None


class ChoiceModel(BaseModel):
    index: int
    delta: DeltaModel
    logprobs: None
    finish_reason: str | None


class ChunkModel(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChoiceModel]


def pydantic_chunks(n: int) -> None:
    for _ in range(n):
        delta = DeltaModel(content="tok")
        choice = ChoiceModel(index=0, delta=delta, logprobs=None, finish_reason=None)
        chunk = ChunkModel(
            id="chatcmpl-1",
            object="chat.completion.chunk",
            created=int(time.time()),
            model="default",
            choices=[choice],
        )
        chunk.model_dump_json(exclude_unset=True)


def typeddict_chunks(n: int) -> None:
    for _ in range(n):
        delta: Delta = {"content": "tok"}
        choice: ChunkChoice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        chunk: Chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": "default",
            "choices": [choice],
        }
        json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    ways = {"pydantic + model_dump_json": pydantic_chunks, "TypedDict + json.dumps": typeddict_chunks}
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(args.repeat):  # interleaved: a busy moment of the machine falls on both
        for name, fn in ways.items():
            best[name] = min(best[name], timeit.timeit(lambda fn=fn: fn(args.chunks), number=1))
    for name, seconds in best.items():
        print(
            f"{name:28s} {seconds * 1000:8.1f} ms per {args.chunks:,} chunks "
            f"({seconds / args.chunks * 1e6:.1f} µs each)"
        )


if __name__ == "__main__":
    main()
