"""Tiny random-weight multimodal pairs for tests: a text decoder (`tinymodels.build_tiny_gguf`) and
the projector GGUF (an "mmproj") that llama.cpp's `libmtmd` loads next to it.

`build_vision_pair(dir)` writes a Gemma 3 text model and a `gemma3` projector: a SigLIP ViT (patches
of 8 over a 64x64 image, width 32, 2 layers), a 2x2 average pool and a projection into the text
model's width, so every image is 16 embeddings between `<start_of_image>` and `<end_of_image>`.
`build_audio_pair(dir)` writes a Qwen2 text model and a `qwen2a` projector (Qwen2-Audio's): a Whisper
encoder (two convolutions over 80 mel bins, width 32, 2 layers), a stride-2 average pool and one
linear layer, so every 30 s window of audio (mtmd pads a shorter clip to one) is 750 embeddings
between `<|audio_bos|>` and `<|audio_eos|>`.

The tensor names, shapes and metadata are those llama.cpp's loader reads (tools/mtmd/clip.cpp,
clip-impl.h): llama.cpp ne order is written below, numpy's is the reverse. Matrices and convolution
kernels are F16; norms, biases and the position embeddings (added to F32 activations) are F32. The
weights are seeded: the same call gives the same files, byte for byte. Each projector is under 1 MB
and is written in milliseconds; the text model is most of a pair (SmolLM2's vocabulary). A `shape`
(`VisionShape`, `AudioShape`) gives a projector other dimensions: `GEMMA3_SIGLIP` and `WHISPER_LARGE`
are published ones, for measuring what a real encoder costs (benchmarks/encoder_cost.py)."""

from __future__ import annotations

import io
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from llmhost.bench.load.images import png as png  # re-exported: the tests' images are the bench's PNGs
from tests.tinymodels import N_EMBD, build_tiny_gguf

# the vision tower: a 64x64 image in 8x8 patches is an 8x8 grid, pooled 2x2 to 4x4 = 16 embeddings
IMAGE_SIZE = 64
PATCH_SIZE = 8
POOL = 2
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE // POOL) ** 2

# the audio tower: Whisper's front end (16 kHz, 10 ms hops) cut in 30 s windows of 3000 mel frames;
# the stride-2 convolution halves them to 1500 positions, the projector's pooling to 750 embeddings
SAMPLE_RATE = 16000
N_MEL = 80
AUDIO_POSITIONS = 1500
AUDIO_TOKENS = AUDIO_POSITIONS // 2

# both encoders: narrower than the text model (N_EMBD), whose width the projection maps to
ENC_EMBD = 32
ENC_FF = 64  # not ENC_EMBD: clip.cpp swaps up and down where the down matrix is ENC_EMBD wide (old files)
ENC_HEADS = 2
ENC_LAYERS = 2

# the M-RoPE vision tower (Qwen2-VL's): patches of 4, merged 2x2, the image resized to multiples of 8
# between 8 and 4096 merged patches; a 48x40 image is 6x5 = 30 embeddings over max(6, 5) = 6 positions
MROPE_PATCH = 4
MROPE_MERGE = 2


@dataclass(frozen=True, slots=True)
class EncoderShape:
    """A projector's transformer encoder and projection; the defaults are the tiny pairs'."""

    embd: int = ENC_EMBD
    ff: int = ENC_FF
    heads: int = ENC_HEADS
    layers: int = ENC_LAYERS
    projection: int = N_EMBD  # the text model's width: libmtmd refuses a projector of another
    # the spread of the weight matrices; at a real width ~ embd ** -0.5 keeps the activations in F16's
    # range through the layers (the tiny pairs' 0.2 is theirs, kept so their files stay as they were)
    std: float = 0.2


@dataclass(frozen=True, slots=True)
class VisionShape(EncoderShape):
    """The `gemma3` projector's: SigLIP over `image_size` pixels in patches, pooled `pool` x `pool`."""

    image_size: int = IMAGE_SIZE
    patch_size: int = PATCH_SIZE
    pool: int = POOL

    @property
    def tokens(self) -> int:
        """Embeddings an image becomes."""
        return (self.image_size // self.patch_size // self.pool) ** 2


@dataclass(frozen=True, slots=True)
class AudioShape(EncoderShape):
    """The `qwen2a` projector's: a Whisper encoder over `n_mel` bins (positions: a 30 s window's)."""

    n_mel: int = N_MEL


# published shapes, for measuring what a real projector costs (benchmarks/encoder_cost.py): Gemma 3's
# SigLIP (896 px in 14 px patches, 4x4 pooled to 256 embeddings; projected to Gemma 3 4B's 2560) and
# Qwen2-Audio's Whisper-large-v3 encoder (128 mel bins; projected to Qwen2-7B's 4096), with their
# weights' spread scaled to their width
GEMMA3_SIGLIP = VisionShape(1152, 4304, 16, 27, 2560, 1152**-0.5, image_size=896, patch_size=14, pool=4)
WHISPER_LARGE = AudioShape(1280, 5120, 20, 32, 4096, 1280**-0.5, n_mel=128)

IMAGE_MARKERS = ("<start_of_image>", "<end_of_image>")
MROPE_MARKERS = ("<|vision_start|>", "<|vision_end|>")
AUDIO_MARKERS = ("<|audio_bos|>", "<|audio_eos|>")

# a Gemma-style turn format; a message's content is a string or (as llama-server renders an image or
# audio message) a list of text parts
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}"
    "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


@dataclass(frozen=True, slots=True)
class Pair:
    """A text model and its projector, as `llama-server -m model --mmproj mmproj` takes them."""

    model: Path
    mmproj: Path


class _Tensors:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.items: dict[str, np.ndarray] = {}

    def add(
        self, name: str, ne: tuple[int, ...], *, std: float = 0.2, ones: bool = False, f32: bool = False
    ) -> None:
        """`ne` in llama.cpp's order; 1-D tensors and `f32` ones are F32, the rest F16."""
        shape = tuple(reversed(ne))
        data = np.ones(shape) if ones else self.rng.normal(0.0, std, shape)
        self.items[name] = data.astype(np.float32 if len(shape) == 1 or f32 else np.float16)

    def norm(self, name: str, width: int) -> None:
        """A LayerNorm: unit weight, a small bias."""
        self.add(f"{name}.weight", (width,), ones=True)
        self.add(f"{name}.bias", (width,), std=0.02)


def _encoder_layers(t: _Tensors, prefix: str, shape: EncoderShape, *, k_bias: bool) -> None:
    """The pre-norm transformer blocks clip.cpp's build_vit runs (LayerNorm, attention, LayerNorm,
    GELU FFN), as `{prefix}.blk.N.*`."""
    embd, ff, std = shape.embd, shape.ff, shape.std
    for i in range(shape.layers):
        blk = f"{prefix}.blk.{i}"
        t.norm(f"{blk}.ln1", embd)
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t.add(f"{blk}.{proj}.weight", (embd, embd), std=std)
            if proj != "attn_k" or k_bias:  # Whisper's key projection has no bias (clip.cpp asserts it)
                t.add(f"{blk}.{proj}.bias", (embd,), std=0.02)
        t.norm(f"{blk}.ln2", embd)
        t.add(f"{blk}.ffn_up.weight", (embd, ff), std=std)
        t.add(f"{blk}.ffn_up.bias", (ff,), std=0.02)
        t.add(f"{blk}.ffn_down.weight", (ff, embd), std=std)
        t.add(f"{blk}.ffn_down.bias", (embd,), std=0.02)
    t.norm(f"{prefix}.post_ln", embd)


def _encoder_hparams(w: gguf.GGUFWriter, modality: str, eps: float, shape: EncoderShape) -> None:
    w.add_uint32(f"clip.{modality}.embedding_length", shape.embd)
    w.add_uint32(f"clip.{modality}.feed_forward_length", shape.ff)
    w.add_uint32(f"clip.{modality}.block_count", shape.layers)
    w.add_uint32(f"clip.{modality}.projection_dim", shape.projection)
    w.add_uint32(f"clip.{modality}.attention.head_count", shape.heads)
    w.add_float32(f"clip.{modality}.attention.layer_norm_epsilon", eps)


def _write(path: Path, w: gguf.GGUFWriter, t: _Tensors) -> Path:
    for name, data in t.items.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _writer(path: Path, projector: str) -> gguf.GGUFWriter:
    w = gguf.GGUFWriter(path, "clip")
    w.add_name("tiny random weights")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_string("clip.projector_type", projector)
    return w


def build_gemma3_mmproj(path: str | Path, seed: int = 0, shape: VisionShape = VisionShape()) -> Path:
    """Write the `gemma3` vision projector (see the module's docstring; `shape`: its dimensions) to
    `path`."""
    path = Path(path)
    embd, size, patch = shape.embd, shape.image_size, shape.patch_size
    w = _writer(path, "gemma3")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    _encoder_hparams(w, "vision", 1e-6, shape)
    w.add_uint32("clip.vision.image_size", size)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_uint32("clip.vision.projector.scale_factor", shape.pool)  # Gemma 3's own pools 4x4
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    t = _Tensors(seed)
    t.add("v.patch_embd.weight", (patch, patch, 3, embd), std=shape.std)  # a conv2d kernel: KW, KH, Cin, Cout
    t.add("v.patch_embd.bias", (embd,), std=0.02)
    t.add("v.position_embd.weight", (embd, (size // patch) ** 2), f32=True)
    _encoder_layers(t, "v", shape, k_bias=True)
    t.add("mm.soft_emb_norm.weight", (embd,), ones=True)
    # clip.cpp multiplies by its transpose, so the text model's width comes first
    t.add("mm.input_projection.weight", (shape.projection, embd), std=embd**-0.5)
    return _write(path, w, t)


def build_qwen2a_mmproj(path: str | Path, seed: int = 0, shape: AudioShape = AudioShape()) -> Path:
    """Write the `qwen2a` audio projector (see the module's docstring; `shape`: its dimensions) to
    `path`."""
    path = Path(path)
    embd, n_mel = shape.embd, shape.n_mel
    w = _writer(path, "qwen2a")
    w.add_bool("clip.has_audio_encoder", True)
    _encoder_hparams(w, "audio", 1e-5, shape)
    w.add_uint32("clip.audio.num_mel_bins", n_mel)
    t = _Tensors(seed)
    # conv1d kernels are K, Cin, Cout; their biases are one column per channel (added along time)
    # fan-in scaled, and unit position embeddings: the silence that pads a clip to 30 s gives the same
    # frame at every step, so the positions are what keeps its embeddings apart (else the text model's
    # attention averages 750 equal vectors and its output is one token over and over)
    t.add("a.conv1d.1.weight", (3, n_mel, embd), std=(3 * n_mel) ** -0.5)
    t.add("a.conv1d.1.bias", (1, embd), std=0.02, f32=True)
    t.add("a.conv1d.2.weight", (3, embd, embd), std=(3 * embd) ** -0.5)
    t.add("a.conv1d.2.bias", (1, embd), std=0.02, f32=True)
    t.add("a.position_embd.weight", (embd, AUDIO_POSITIONS), std=1.0, f32=True)
    _encoder_layers(t, "a", shape, k_bias=False)
    # audio embeddings well under the token embeddings' spread (std 1): 750 of them at full size drown
    # the prompt's text in the residual stream and the output repeats one token whatever the prompt
    t.add("mm.a.fc.weight", (embd, shape.projection), std=0.02)
    t.add("mm.a.fc.bias", (shape.projection,), std=0.02)
    return _write(path, w, t)


def build_qwen2vl_mmproj(
    path: str | Path, seed: int = 0, shape: EncoderShape = EncoderShape(), patch: int = MROPE_PATCH
) -> Path:
    """Write the `qwen2vl_merger` vision projector (Qwen2-VL's) to `path`: a ViT over patches of
    MROPE_PATCH (two patch kernels, one a frame: an image is one frame given twice), rotary positions
    in 2D (M-RoPE, so no position table), and a merger that concatenates each 2x2 block of patches and
    maps it through a GELU MLP into the text model's width (`shape`, `patch`: its dimensions)."""
    path = Path(path)
    w = _writer(path, "qwen2vl_merger")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    _encoder_hparams(w, "vision", 1e-6, shape)
    w.add_uint32("clip.vision.image_size", 64)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_uint32("clip.vision.spatial_merge_size", MROPE_MERGE)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    t = _Tensors(seed)
    for name in ("v.patch_embd.weight", "v.patch_embd.weight.1"):  # no bias: clip.cpp asserts none
        t.add(name, (patch, patch, 3, shape.embd), std=shape.std)
    _encoder_layers(t, "v", shape, k_bias=True)
    merged = shape.embd * MROPE_MERGE**2
    t.add("mm.0.weight", (merged, merged), std=merged**-0.5)
    t.add("mm.0.bias", (merged,), std=0.02)
    t.add("mm.2.weight", (merged, shape.projection), std=merged**-0.5)
    t.add("mm.2.bias", (shape.projection,), std=0.02)
    return _write(path, w, t)


def build_vision_pair(directory: str | Path, seed: int = 0) -> Pair:
    """`directory`/model.gguf (Gemma 3, with Gemma's image markers as control tokens) and
    `directory`/mmproj.gguf (the `gemma3` projector)."""
    return _pair(directory, "gemma3", IMAGE_MARKERS, build_gemma3_mmproj, seed)


def build_audio_pair(directory: str | Path, seed: int = 0) -> Pair:
    """`directory`/model.gguf (Qwen2, with Qwen2-Audio's markers as control tokens) and
    `directory`/mmproj.gguf (the `qwen2a` projector)."""
    return _pair(directory, "qwen2", AUDIO_MARKERS, build_qwen2a_mmproj, seed)


def _pair(
    directory: str | Path,
    arch: str,
    markers: Sequence[str],
    build_mmproj: Callable[[Path, int], Path],
    seed: int,
) -> Pair:
    """A tiny text model of `arch` whose vocabulary holds the projector's `markers` as control tokens,
    and its projector, in `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    model = build_tiny_gguf(
        d / "model.gguf",
        arch=arch,
        chat_template=CHAT_TEMPLATE,
        special_tokens=["<start_of_turn>", "<end_of_turn>", *markers],
        seed=seed,
    )
    return Pair(model, build_mmproj(d / "mmproj.gguf", seed))


def build_mrope_pair(directory: str | Path, seed: int = 0) -> Pair:
    """`directory`/model.gguf (Qwen2-VL's text model: M-RoPE, with its vision markers as control
    tokens) and `directory`/mmproj.gguf (the `qwen2vl_merger` projector)."""
    return _pair(directory, "qwen2vl", MROPE_MARKERS, build_qwen2vl_mmproj, seed)


BUILDERS = {"vision": build_vision_pair, "audio": build_audio_pair, "mrope": build_mrope_pair}


def random_pixels(height: int = 48, width: int = 40, seed: int = 0) -> np.ndarray:
    """A seeded noise image, (height, width, 3) uint8 RGB: not square and not the projector's size,
    so the preprocessor's resize is exercised."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def tone(hz: float = 440.0, seconds: float = 1.0, rate: int = SAMPLE_RATE) -> np.ndarray:
    """A sine at `hz`, amplitude 0.3, as float32 samples."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def wav(samples: np.ndarray, rate: int = SAMPLE_RATE) -> bytes:
    """Mono float samples in [-1, 1] as a 16-bit PCM WAV file."""
    pcm = np.round(np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()
