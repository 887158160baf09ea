"""The embedder's packing, limits and request batching, over a fake decode (no model)."""

from __future__ import annotations

import asyncio
import base64
import threading
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from pydantic import ValidationError

from llmhost.endpoint.control.placement import Allocation
from llmhost.endpoint.control.replica import Replica
from llmhost.endpoint.spec import ComponentSpec, EngineSpec
from llmhost.engine.embedder import (
    ALIGN,
    PAD_TOKEN,
    Embedder,
    EmbedderConfig,
    EmbeddingError,
    aligned,
    check_inputs,
    layout,
)
from llmhost.engine.embedder_loop import AsyncEmbedder
from llmhost.engine.loop import EngineState
from llmhost.engine.request import InvalidRequestError, QueueFullError, RequestTooLargeError
from llmhost.server.protocol.embeddings import EmbeddingRequest
from llmhost.server.serving.apis.embeddings import encode, normalize
from llmhost.store import ResolvedModel

N_VOCAB = 100


def test_layout_starts_every_input_at_an_aligned_offset_and_pads_the_rest_into_its_own_sequence() -> None:
    items = layout([[1] * 3, [2] * ALIGN, [3] * (ALIGN + 1)], pad_seq=7)
    offset = 0
    for tokens, start, seq, n_out in items:
        if seq != 7:
            assert offset % ALIGN == 0 and start == 0 and n_out == len(tokens)
        else:
            assert set(tokens) == {PAD_TOKEN}
        offset += len(tokens)
    assert offset == aligned(3) + aligned(ALIGN) + aligned(ALIGN + 1)
    pads = [start for _, start, seq, _ in items if seq == 7]
    assert pads == [0, ALIGN - 3]  # the padding sequence's positions keep increasing


def test_config_sizes_the_context_for_the_longest_input_and_llama_cpp_pooling() -> None:
    cfg = EmbedderConfig(max_input_tokens=300, max_batch_tokens=100, max_batch_inputs=64)
    assert cfg.n_seq == 128  # 64 inputs + the padding sequence, to a power of two
    assert cfg.decode_tokens == 384 and cfg.decode_tokens % cfg.n_seq == 0
    model = cfg.model_config()
    assert model.max_batch_tokens == 384 and model.n_seq_max == 128 and not model.flash_attn
    with pytest.raises(ValueError, match="pooling"):
        EmbedderConfig(pooling="max")
    with pytest.raises(ValueError, match="max_batch_inputs"):
        EmbedderConfig(max_batch_inputs=256)


def test_check_inputs_names_the_field_and_the_limit() -> None:
    cfg = EmbedderConfig(max_input_tokens=4, max_inputs=2)
    with pytest.raises(RequestTooLargeError) as too_long:
        check_inputs([[1], [1] * 5], cfg, N_VOCAB)
    assert (too_long.value.field_name, too_long.value.value, too_long.value.limit) == ("input", 5, 4)
    with pytest.raises(RequestTooLargeError) as too_many:
        check_inputs([[1]] * 3, cfg, N_VOCAB)
    assert too_many.value.limit == 2
    with pytest.raises(InvalidRequestError, match="token id 100") as bad:
        check_inputs([[1, 100]], cfg, N_VOCAB)
    assert bad.value.limit == N_VOCAB - 1
    with pytest.raises(RequestTooLargeError, match="input 0 is empty"):
        check_inputs([[]], cfg, N_VOCAB)


def test_request_shapes_and_base64() -> None:
    assert EmbeddingRequest(input="a").inputs() == ["a"]
    assert EmbeddingRequest(input=[1, 2]).inputs() == [[1, 2]]
    assert EmbeddingRequest(input=[[1], [2]]).inputs() == [[1], [2]]
    assert EmbeddingRequest(input=["a", "b"]).inputs() == ["a", "b"]
    for bad in ([1, "a"], [True], 3, [[1], "a"]):
        with pytest.raises(ValidationError, match="input must be a string"):
            EmbeddingRequest(input=bad)
    vector = normalize(np.array([3.0, 4.0], dtype=np.float32))
    decoded = np.frombuffer(base64.b64decode(cast(str, encode(vector, "base64"))), dtype="<f4")
    assert decoded.tolist() == pytest.approx([0.6, 0.8])


class FakeModel:
    n_vocab = N_VOCAB
    n_embd = 4

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return [ord(c) % N_VOCAB for c in text]


class FakeEmbedder:
    """Embeds input t as a vector made of its first token; each decode waits for `gate` when set."""

    def __init__(self, config: EmbedderConfig) -> None:
        self.model = FakeModel()
        self.config = config
        self.decodes: list[list[list[int]]] = []
        self.gate: threading.Event | None = None
        self.fail = False

    def embed(self, inputs: list[list[int]]) -> list[Any]:
        if self.gate is not None:
            self.gate.wait(10)
        self.decodes.append(list(inputs))
        if self.fail:
            raise RuntimeError("decode broke")
        return [normalize(np.full(4, t[0] + 1, dtype=np.float32)) for t in inputs]

    def close(self) -> None:
        pass


def started(cfg: EmbedderConfig) -> tuple[AsyncEmbedder, FakeEmbedder]:
    fake = FakeEmbedder(cfg)
    embedder = AsyncEmbedder("fake.gguf", cfg, load=lambda: cast(Embedder, fake))
    embedder.start()
    assert embedder.wait_ready(10)
    return embedder, fake


async def test_concurrent_requests_share_decodes_within_the_limits() -> None:
    cfg = EmbedderConfig(max_input_tokens=8, max_batch_tokens=3 * ALIGN, max_batch_inputs=3)
    embedder, fake = started(cfg)
    try:
        fake.gate = threading.Event()
        first = asyncio.create_task(embedder.embed([[1]]))
        await asyncio.sleep(0.05)  # the worker holds [[1]] at the gate; the next requests queue up
        rest = [asyncio.create_task(embedder.embed([[i], [i + 1]])) for i in (10, 20)]
        await asyncio.sleep(0.05)
        fake.gate.set()
        results = await asyncio.gather(first, *rest)
    finally:
        embedder.shutdown()
    assert [len(r) for r in results] == [1, 2, 2]
    assert fake.decodes == [[[1]], [[10], [11], [20]], [[21]]]  # 3 inputs a decode, oldest first
    assert all(np.linalg.norm(v) == pytest.approx(1.0) for r in results for v in r)


async def test_decodes_are_packed_up_to_pack_tokens_and_a_longer_input_goes_alone() -> None:
    cfg = EmbedderConfig(max_input_tokens=100, max_batch_tokens=128, pack_tokens=2 * ALIGN)
    embedder, fake = started(cfg)
    try:
        short = [[i] * ALIGN for i in (1, 2, 3)]  # one aligned block each: two fill a decode
        long = [9] * 3 * ALIGN  # longer than pack_tokens: a decode of its own
        await embedder.embed([*short, long, [4]])
    finally:
        embedder.shutdown()
    assert [len(d) for d in fake.decodes] == [2, 1, 1, 1]
    assert fake.decodes[2] == [long]


async def test_a_failed_decode_fails_its_requests_and_a_full_queue_is_refused() -> None:
    cfg = EmbedderConfig(max_input_tokens=8, max_batch_tokens=8, max_requests=1, max_failures=2)
    embedder, fake = started(cfg)
    try:
        fake.fail = True
        with pytest.raises(EmbeddingError, match="decode broke"):
            await embedder.embed([[1]])
        fake.fail, fake.gate = False, threading.Event()
        waiting = asyncio.create_task(embedder.embed([[1]]))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFullError):
            await embedder.embed([[2]])
        fake.gate.set()
        assert len(await waiting) == 1
        fake.fail = True
        for _ in range(2):
            with pytest.raises(EmbeddingError):
                await embedder.embed([[3]])
        await asyncio.sleep(0.05)
        assert embedder.state is EngineState.DEAD
    finally:
        embedder.shutdown()


async def test_a_cancelled_request_skips_its_remaining_inputs() -> None:
    cfg = EmbedderConfig(max_input_tokens=8, max_batch_tokens=8, max_batch_inputs=1)
    embedder, fake = started(cfg)
    try:
        fake.gate = threading.Event()
        task = asyncio.create_task(embedder.embed([[1], [2], [3]]))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        fake.gate.set()
        for _ in range(50):
            if embedder.in_flight == 0:
                break
            await asyncio.sleep(0.02)
    finally:
        embedder.shutdown()
    assert embedder.in_flight == 0
    assert fake.decodes == [[[1]]]  # the decode under way finished; inputs 2 and 3 never ran


def test_an_embeddings_component_starts_its_copies_with_embeddings(tmp_path: Path) -> None:
    def command(spec: ComponentSpec) -> list[str]:
        model = ResolvedModel(tmp_path / "m.gguf")
        return Replica(spec, 0, model, Allocation((0,), 1.0, 1, 100), tmp_path)._command()

    embeds = command(ComponentSpec(name="emb", embeddings=True, engine=EngineSpec(pooling="mean")))
    assert "--embeddings" in embeds and embeds[embeds.index("--pooling") + 1] == "mean"
    assert "--embeddings" not in command(ComponentSpec(name="gen"))
