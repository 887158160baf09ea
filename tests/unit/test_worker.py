"""The lifecycle the engine and the embedder share (engine.worker.ModelWorker): a failed load is FAILED
with its reason, and a request to either then names its state."""

from __future__ import annotations

from typing import Any

import pytest

from llmhost.engine import AsyncEngine, EngineConfig, EngineState, EngineUnavailableError
from llmhost.engine.embedder import EmbedderConfig
from llmhost.engine.embedder_loop import AsyncEmbedder


def _broken() -> Any:
    raise OSError("no such model")


@pytest.mark.parametrize("kind", ["engine", "embedder"])
def test_a_failed_load_is_failed_with_its_reason(kind: str) -> None:
    worker: AsyncEngine | AsyncEmbedder
    if kind == "engine":
        worker = AsyncEngine("m.gguf", EngineConfig(), load=_broken)
    else:
        worker = AsyncEmbedder("m.gguf", EmbedderConfig(), load=_broken)
    worker.start()
    assert worker.wait_ready(10) is False
    assert worker.state is EngineState.FAILED and worker.error == "no such model"
    with pytest.raises(EngineUnavailableError, match=f"{kind} is failed: no such model"):
        worker.tokenize("hi")
    worker.shutdown()
    assert worker.state is EngineState.FAILED  # shutting down does not hide why it never served
