"""A model served on its own thread: the lifecycle the generation engine (`AsyncEngine`) and the
embedder (`AsyncEmbedder`) share. The thread loads the model, then owns it (llama.cpp contexts are not
thread-safe); llama_decode releases the GIL, so the event loop keeps serving HTTP meanwhile.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from llmhost.engine.llamacpp.gguf_meta import ModelInfo
from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.engine.request import EngineUnavailableError

log = logging.getLogger(__name__)


class EngineState(enum.Enum):
    LOADING = "loading"  # model file being read, context being created
    READY = "ready"  # serving requests
    FAILED = "failed"  # load failed; `error` says why
    DEAD = "dead"  # the worker thread died or its work kept failing: replace this process
    STOPPED = "stopped"  # shut down


class HasModel(Protocol):
    @property
    def model(self) -> LlamaModel: ...


M = TypeVar("M", bound=HasModel)


class ModelWorker(Generic[M]):
    """Loads `M` on a background thread and serves with it (`_serve`) until shut down; a failed load
    is FAILED, `dead_error` from `_serve` (or a bug) is DEAD: every accepted request is failed (`_die`)."""

    kind = "engine"  # what messages call it
    dead_error: type[Exception] = RuntimeError

    def __init__(self, load: Callable[[], M]) -> None:
        self._load = load
        self.state = EngineState.LOADING
        self.error: str | None = None
        self._model: M | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Load the model and start serving, on a background thread."""
        self._thread = threading.Thread(target=self._main, name=f"llmhost-{self.kind}", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        self._loaded.wait(timeout)
        return self.ready

    @property
    def ready(self) -> bool:
        return self.state is EngineState.READY

    @property
    def dead(self) -> bool:
        return self.state is EngineState.DEAD

    def shutdown(self) -> None:
        with self._cond:
            if self.state in (EngineState.READY, EngineState.LOADING):
                self.state = EngineState.STOPPED
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # -- the model -----------------------------------------------------------------------------------
    def _require(self) -> M:
        if self._model is None or self.state is not EngineState.READY:
            raise EngineUnavailableError(
                f"{self.kind} is {self.state.value}" + (f": {self.error}" if self.error else "")
            )
        return self._model

    @property
    def info(self) -> ModelInfo:
        return self._require().model.info

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self._require().model.tokenize(text, add_special=add_special)

    def detokenize(self, tokens: list[int]) -> str:
        return self._require().model.detokenize(tokens)

    def token_text(self, token: int) -> str:
        return self._require().model.piece(token, special=True).decode("utf-8", "replace")

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token adds to detokenized text (special tokens add none)."""
        return self._require().model.piece(token)

    # -- the worker thread ---------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            model = self._load()
        except Exception as exc:
            self.error = str(exc)
            self.state = EngineState.FAILED
            log.error("model load failed: %s", exc)
            self._loaded.set()
            return
        with self._cond:
            self._model = model
            if self.state is EngineState.LOADING:  # not shut down meanwhile
                self.state = EngineState.READY
        self._loaded.set()
        try:
            self._serve(model)
        except self.dead_error as exc:
            self._die(str(exc))
        except BaseException as exc:  # a bug: everything accepted must still hear about it
            self._die(f"{self.kind} thread died: {type(exc).__name__}: {exc}")
            raise

    def _serve(self, model: M) -> None:
        """Serve until the state leaves READY; close the model when done."""
        raise NotImplementedError

    def _die(self, reason: str) -> None:
        """Fail every accepted request at once and refuse new ones; the server exits on DEAD."""
        raise NotImplementedError
