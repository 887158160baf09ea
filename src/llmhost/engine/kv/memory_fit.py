"""A copy's engine sized to the memory it is given (`memory_mb`, an endpoint copy's reservation): the
weights, the KV cache of every stream and the process must fit it. Extra cached streams
(--prefix-cache-seqs) are a cache: fewer of them are kept when they do not fit; running sequences are
what the user asked for: when those alone do not fit, the load is refused naming each part.

Counted here: the process as it is once the model is loaded (libraries, what of the weights is
resident), the rest of the weights counted whole (mmap pages them in as they are read), and the KV cache
of every stream (allocated by llama.cpp, filled as sequences grow: sliding-window layers at their window
unless --swa-full), and the SWA checkpoints' budget: the bytes every sequence's checkpoints may hold
together in host memory (as many as the running sequences keep at most; free slots' KV shares it, the
oldest checkpoints dropped past it), so an extra cached stream costs its KV only; with --mmproj, the
projector's weights, its encoder and the media embeddings it keeps (projector_memory.py: the projector
loads after this plan is made, so none of it is in the process yet); the logits rows a step may compute
beyond each sequence's next token (a scored prompt's, speculative guesses'), which llama.cpp keeps at
their largest. The host cache's automatic budget takes what is left afterwards (host_cache.py).

Not counted: a generation server's embeddings context (server/serving/side_embedder.py), loaded on the
first embeddings request, after this plan was made: its weights are the file's mapped pages (shared,
reclaimable), but its private buffers grow with the tokens it decodes at once, the vocabulary's logits
above all (n_vocab x 4 bytes x 2 a token: 2 MiB a token for Gemma's 262k vocabulary). Under
--memory-mb, start such a server with --no-chat-embeddings, or serve embeddings from an --embeddings copy
sized for them."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import psutil
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from llmhost.engine.config import FLOAT32_BYTES, EngineConfig
from llmhost.engine.kv.swa_checkpoints import CheckpointPolicy, SwaCheckpoints
from llmhost.engine.projector_memory import ProjectorMemory
from llmhost.errors import ModelError

log = logging.getLogger(__name__)
MIB = 2**20
# what the process takes after the load: the grammar vocabulary index, llama.cpp's compute and output
# buffers as decodes touch them (a prompt's logits apart: prompt_logits_bytes), request buffers (a served
# Gemma 3 270M: 30 MiB more RSS right after load)
RUNTIME_MARGIN_MB = 64


def cache_type_bytes(name: str, elements: int) -> float:
    """Bytes of `elements` values stored as the KV cache type `name` (llama.cpp's name: f16, q8_0, …):
    a quantized type packs blocks of 32 values with their scale (q8_0: 34 bytes a block)."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]]
    return elements * size / block


def kv_bytes(
    layers: int, kv_heads: int, key: int, value: int, type_k: str = "f16", type_v: str = "f16"
) -> int:
    """K and V of one position over all layers in the given cache types."""
    return round(
        layers * (cache_type_bytes(type_k, kv_heads * key) + cache_type_bytes(type_v, kv_heads * value))
    )


def gguf_kv_bytes(metadata: dict[str, object], type_k: str = "f16", type_v: str = "f16") -> int:
    """`kv_bytes` from a GGUF's metadata (gguf_check's reading): a head's size is the key/value length
    when given, else the width over the heads (llama.cpp's default); a per-layer head count (an array,
    read as its length) counts as the width's heads."""
    arch = str(metadata.get("general.architecture", ""))

    def number(key: str, default: int) -> int:
        value = metadata.get(f"{arch}.{key}")
        return value if isinstance(value, int) and value > 0 else default

    heads = number("attention.head_count", 1)
    width = number("embedding_length", 0) // heads
    return kv_bytes(
        number("block_count", 0),
        number("attention.head_count_kv", heads),
        number("attention.key_length", width),
        number("attention.value_length", width),
        type_k,
        type_v,
    )


@dataclass(frozen=True)
class KvShape:
    """What sizes a KV stream: K and V of a position over all layers, how many layers, how many of
    them have a sliding window and its length (0: none)."""

    bytes_per_token: int
    layers: int
    swa_layers: int = 0
    swa_window: int = 0


# llama.cpp's sliding-window period per architecture where the GGUF gives none (`set_swa_pattern(n)`:
# every n-th layer full-attention, the others windowed); a GGUF's sliding_window_pattern overrides it
_SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2}


def gguf_kv_shape(metadata: dict[str, object], type_k: str = "f16", type_v: str = "f16") -> KvShape:
    """What sizes a KV stream of the GGUF, from its metadata: `gguf_kv_bytes`, its layers, and those
    with a sliding window (an architecture llama.cpp gives one, a window length in the file)."""
    arch = str(metadata.get("general.architecture", ""))
    layers, window = metadata.get(f"{arch}.block_count"), metadata.get(f"{arch}.attention.sliding_window")
    period = metadata.get(f"{arch}.attention.sliding_window_pattern", _SWA_PERIOD.get(arch))
    per_token = gguf_kv_bytes(metadata, type_k, type_v)
    if not isinstance(layers, int) or not isinstance(window, int) or window <= 0:
        return KvShape(per_token, layers if isinstance(layers, int) else 0)
    if not isinstance(period, int) or isinstance(period, bool) or period < 0:
        return KvShape(per_token, layers)  # a per-layer list, or unknown: counted whole
    swa_layers = layers if period == 0 else layers - layers // period
    return KvShape(per_token, layers, swa_layers, window)


class MemoryFitError(ModelError, ValueError):
    """The running sequences, the weights and the process do not fit `memory_mb`; says what each takes."""


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


@dataclass(frozen=True)
class MemoryPlan:
    memory_mb: int
    process_bytes: int  # the process now, with what of the weights is resident
    weights_left_bytes: int  # the weights not resident yet
    stream_bytes: int  # one sequence's KV: max_total_tokens positions
    checkpoint_bytes: int = 0  # the SWA checkpoints' budget (checkpoint_budget)
    projector: ProjectorMemory | None = None  # --mmproj's share, not loaded yet
    logits_bytes: int = 0  # a step's prompt logits at most (prompt_logits_bytes)
    guess_logits_bytes: int = 0  # a step's speculative guesses' logits at most (guess_logits_bytes)

    @property
    def projector_bytes(self) -> int:
        return self.projector.total_bytes if self.projector is not None else 0

    @property
    def fixed_bytes(self) -> int:
        fixed = self.process_bytes + self.weights_left_bytes + RUNTIME_MARGIN_MB * MIB + self.checkpoint_bytes
        return fixed + self.projector_bytes + self.logits_bytes + self.guess_logits_bytes

    def parts(self) -> str:
        """What it counts besides the KV cache, in MiB, as the start log and a refusal name them."""
        projector = f" + {self.projector.describe()}" if self.projector is not None else ""
        guesses = self.guess_logits_bytes / MIB
        return (
            f"process {self.process_bytes / MIB:.0f} MiB + weights not yet resident "
            f"{self.weights_left_bytes / MIB:.0f} MiB{projector} + runtime {RUNTIME_MARGIN_MB} MiB + "
            f"SWA checkpoints {self.checkpoint_bytes / MIB:.0f} MiB + "
            f"prompt logits {self.logits_bytes / MIB:.0f} MiB"
            + (f" + speculative guesses' logits {guesses:.0f} MiB" if guesses else "")
        )

    @property
    def fixed_mb(self) -> float:
        return self.fixed_bytes / MIB

    def need_mb(self, streams: int) -> float:
        return self.fixed_mb + streams * self.stream_bytes / MIB

    def streams_that_fit(self) -> int:
        room = self.memory_mb * MIB - self.fixed_bytes
        return max(0, room // self.stream_bytes) if self.stream_bytes else 1 << 30


def swa_cells(config: EngineConfig, window: int) -> int:
    """Cells a stream of a windowed sliding-window layer holds (llama.cpp: the window and a micro-batch,
    padded to 256, at most the stream)."""
    return min(config.max_total_tokens, -(-(window + config.llama_n_ubatch) // 256) * 256)


# a saved state's bytes beside its K and V rows: a cell's position, sequence count and id; the header,
# the streams' cell counts (256 at most) and each layer's row header
_CELL_FRAMING = 12
_STATE_FRAMING = 2048


def _windowed(config: EngineConfig, kv: KvShape) -> bool:
    return not config.swa_full and kv.swa_layers > 0 and kv.swa_window > 0 and kv.layers > 0


def stream_bytes(config: EngineConfig, kv: KvShape) -> int:
    """One sequence's KV (max_total_tokens positions): the sliding-window layers at their window (the
    cells llama.cpp gives a stream of them) unless swa_full."""
    full = config.max_total_tokens * kv.bytes_per_token
    if not _windowed(config, kv):
        return full
    swa_per_token = kv.bytes_per_token * kv.swa_layers / kv.layers
    return round(full - swa_per_token * (config.max_total_tokens - swa_cells(config, kv.swa_window)))


def checkpoint_budget(config: EngineConfig, kv: KvShape) -> int:
    """The bytes all SWA checkpoints may hold together: each running sequence's at their largest (a
    checkpoint holds the sliding-window layers' cells of its last window of positions, at most as many
    as its position), `swa_checkpoints` of them before the longest prompt's last micro-batch, with the
    state's framing (a cell's position and sequence, the headers); 0 where the layers hold every
    position (no checkpoints are made)."""
    if not _windowed(config, kv):
        return 0
    policy = CheckpointPolicy.of(config, windowed=True)
    cells = policy.most_cells(config.max_input_tokens, kv.swa_window)
    per_cell = kv.bytes_per_token * kv.swa_layers / kv.layers + _CELL_FRAMING
    return round(config.max_concurrent * (cells * per_cell + policy.per_seq * _STATE_FRAMING))


def running_kv_bytes(config: EngineConfig, kv: KvShape) -> int:
    """The KV of `config`'s running sequences and the SWA checkpoints' budget: what a copy needs beyond
    its weights and process (an estimate of memory_mb for a model that sets none)."""
    return config.max_concurrent * stream_bytes(config, kv) + checkpoint_budget(config, kv)


def new_checkpoints(config: EngineConfig, kv: KvShape, windowed: bool) -> SwaCheckpoints:
    """The SWA checkpoints of a context (none unless `windowed`) within the budget counted here."""
    budget = checkpoint_budget(config, kv) if windowed else 0
    return SwaCheckpoints(CheckpointPolicy.of(config, windowed, budget))


def prompt_logits_bytes(config: EngineConfig, n_vocab: int) -> int:
    """What a step computing prompt logprobs adds at most: its prompt rows of logits, twice (llama.cpp's
    compute buffer and the logits it hands back, both kept at their largest once touched)."""
    return 2 * FLOAT32_BYTES * n_vocab * config.prompt_logits_rows(n_vocab)


def guess_logits_bytes(config: EngineConfig, n_vocab: int) -> int:
    """What verifying speculative guesses adds at most: the logits rows of every running sequence's
    guesses, twice as prompt_logits_bytes' are (none without speculation)."""
    return 2 * FLOAT32_BYTES * n_vocab * config.guess_rows(n_vocab)


def plan(
    config: EngineConfig,
    rss_before_load: int,
    weights_bytes: int,
    kv: KvShape,
    projector: ProjectorMemory | None,
    n_vocab: int,
) -> MemoryPlan:
    now = rss_bytes()
    resident = max(0, min(weights_bytes, now - rss_before_load))
    return MemoryPlan(
        config.memory_mb,
        now,
        weights_bytes - resident,
        stream_bytes(config, kv),
        checkpoint_budget(config, kv),
        projector,
        prompt_logits_bytes(config, n_vocab),
        guess_logits_bytes(config, n_vocab),
    )


def fit_memory(config: EngineConfig, p: MemoryPlan) -> EngineConfig:
    """`config` with as many extra cached streams as `memory_mb` holds (unchanged without a bound);
    MemoryFitError when the running sequences alone do not fit."""
    if not config.memory_mb:
        return config
    fits = p.streams_that_fit()
    if fits < config.max_concurrent:
        raise MemoryFitError(
            f"--memory-mb {config.memory_mb} cannot hold {config.max_concurrent} running sequences of "
            f"{config.max_total_tokens} tokens: {p.parts()} + KV cache {config.max_concurrent} x "
            f"{p.stream_bytes / MIB:.1f} MiB = {p.need_mb(config.max_concurrent):.0f} MiB (room for {fits}); "
            "lower --max-concurrent or --max-total-tokens, or give it more memory"
        )
    idle = min(config.prefix_cache_seqs, fits - config.max_concurrent)
    streams = config.max_concurrent + idle
    log.info(
        "--memory-mb %d: %s + KV cache %d streams x %.1f MiB = %.0f MiB",
        config.memory_mb,
        p.parts(),
        streams,
        p.stream_bytes / MIB,
        p.need_mb(streams),
    )
    if idle < config.prefix_cache_seqs:
        log.warning(
            "--memory-mb %d holds %d extra cached stream(s), not %d: %.0f MiB with them "
            "(each %.1f MiB of KV); give it more memory or lower --max-total-tokens to keep more",
            config.memory_mb,
            idle,
            config.prefix_cache_seqs,
            p.need_mb(config.max_concurrent + idle),
            p.stream_bytes / MIB,
        )
        return dataclasses.replace(config, prefix_cache_seqs=idle)
    return config
