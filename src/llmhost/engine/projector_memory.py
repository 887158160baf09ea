"""What a multimodal projector (an mmproj GGUF, `--mmproj`) adds to a copy's memory: one estimate, read
from the file alone, that the engine's memory fit (--memory-mb) and the endpoint's estimate of a model's
memory_mb both count.

- Its weights: the file's size. libmtmd reads them into buffers of its own (no mmap), so they are all
  resident once it loads (its load log's "model size" is the file's, less the header).
- Its encoder: the compute buffer libmtmd reserves for the largest input, and what it keeps beside it
  (the preprocessed input, the output embeddings, an audio model's mel tables).
- The encoded media's embeddings the engine keeps for media sent again (media_cache's budget).

The compute buffer, with the flash attention libmtmd turns on, is one encoder layer's activations at
their widest: each position's feed-forward row and three of its width (positions x (FF + 3 x width) x 4
bytes); measured equal to the "compute buffer size" libmtmd logs for a gemma3 projector of Gemma 3's
SigLIP (896/14 = 4096 positions, width 1152, FF 4304: 121.25 MiB) and a qwen2a one of Qwen2-Audio's
Whisper (1500 positions, width 1280, FF 5120: 51.27 MiB). The process's RSS after one encode, less the
projector's file, grew by 1.48 and 1.41 times those buffers (two threads; random-weight projectors of
two layers: the compute buffer is one layer's, reused by each); and by 0.9 and 9.9 MiB for the tiny test
pairs' projectors (tests/tinymmproj.py), whose buffers are well under 1 MiB: hence 1.5 times the buffer
and 16 MiB for what does not scale with it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmhost.engine.llamacpp.gguf_check import GGUFError, check_file
from llmhost.engine.media_cache import DEFAULT_BUDGET_BYTES

MIB = 2**20
ENCODER_BUFFER_SHARE = 1.5  # the RSS an encode adds, per byte of its compute buffer (measured above)
ENCODER_FIXED_BYTES = 16 * MIB  # what does not scale with the buffer (the tiny audio pair: 9.9 MiB)
# Whisper's 30 s window of 3000 mel frames, halved by its stride-2 convolution: the positions of every
# Whisper-based audio projector (qwen2a, ultravox, voxtral); the GGUF states no such length
AUDIO_POSITIONS = 1500
# the merged patches of the image libmtmd warms a dynamic-resolution encoder (Qwen2-VL's family) up
# with, sizing its compute buffer: 46 x 46 (clip.cpp), each `spatial_merge_size` squared patches
DYNAMIC_WARMUP_TOKENS = 46 * 46
_FLOAT = 4


@dataclass(frozen=True)
class ProjectorMemory:
    """A projector's share of a copy's memory, in bytes."""

    weights_bytes: int  # its file
    encoder_bytes: int  # the encoder's compute buffer and what it keeps beside it
    embeddings_bytes: int = DEFAULT_BUDGET_BYTES  # the engine's cache of encoded media

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.encoder_bytes + self.embeddings_bytes

    def describe(self) -> str:
        """Its parts in MiB, as the start log and the fit's refusal name them."""
        return (
            f"projector {self.total_bytes / MIB:.0f} MiB (weights {self.weights_bytes / MIB:.0f} + encoder "
            f"{self.encoder_bytes / MIB:.0f} + media embeddings cache {self.embeddings_bytes / MIB:.0f})"
        )


def _number(metadata: dict[str, object], key: str) -> int:
    value = metadata.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _positions(metadata: dict[str, object], modality: str) -> int:
    """Positions an encoder layer holds at the largest input: a vision tower's patches of the image
    size it resizes to, an audio tower's Whisper window."""
    if modality == "audio":
        return AUDIO_POSITIONS
    merge = _number(metadata, "clip.vision.spatial_merge_size")
    if merge:  # Qwen2-VL's family resizes to any size: libmtmd sizes its buffer at its warm-up image's
        return DYNAMIC_WARMUP_TOKENS * merge**2
    patch = _number(metadata, "clip.vision.patch_size")
    return (_number(metadata, "clip.vision.image_size") // patch) ** 2 if patch else 0


def compute_buffer_bytes(metadata: dict[str, object]) -> int:
    """The compute buffers libmtmd reserves for the projector's encoders (a vision one and an audio
    one each have their own): positions x (FF + 3 x width) floats."""
    total = 0
    for modality in ("vision", "audio"):
        width = _number(metadata, f"clip.{modality}.embedding_length")
        if width:
            ff = _number(metadata, f"clip.{modality}.feed_forward_length") or 4 * width
            total += _positions(metadata, modality) * (ff + 3 * width) * _FLOAT
    return total


def projector_memory(path: str | Path) -> ProjectorMemory:
    """The projector's share of memory, from its file (an unreadable or missing one counts what is there:
    its load fails and says why)."""
    path = Path(path)
    try:
        metadata = check_file(path, read_arrays=0).metadata
    except GGUFError:
        metadata = {}
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    encoder = round(compute_buffer_bytes(metadata) * ENCODER_BUFFER_SHARE) + ENCODER_FIXED_BYTES
    return ProjectorMemory(size, encoder)
