"""Hugging Face safetensors directory -> GGUF (F16 or F32), written with the `gguf` package.

Supported: the llama architecture (`LlamaForCausalLM`, `MistralForCausalLM` without sliding window),
with a tokenizer given either as a SentencePiece `tokenizer.model` (llama/SPM vocabulary) or as a
byte-level BPE `tokenizer.json` (GPT-2 or Llama-3 pre-tokenizer). Not supported: other
architectures, rope scaling, other BPE pre-tokenizers, WordPiece/Unigram `tokenizer.json`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llmhost.errors import ModelError

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")
OUT_TYPES = ("f16", "f32")

# the pre-tokenizer regex of Llama 3 (llama.cpp's "llama-bpe")
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class ConvertError(ModelError, ValueError):
    """The directory cannot be converted, with the reason."""


@dataclass(slots=True)
class ConvertResult:
    path: Path
    n_tensors: int
    n_params: int
    tokenizer: str
    warnings: list[str] = field(default_factory=list)


# -- safetensors (read directly: numpy has no bfloat16, the format is a JSON header + raw data) ------
_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": np.uint16}


def iter_safetensors(path: Path) -> Iterator[tuple[str, npt.NDArray[np.float32]]]:
    """(name, float32 array) of every tensor in one .safetensors file."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if len(raw) < 8:
        raise ConvertError(f"{path} is not a safetensors file (too short)")
    (n_header,) = struct.unpack("<Q", bytes(raw[:8]))
    try:
        header = json.loads(bytes(raw[8 : 8 + n_header]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConvertError(f"{path} is not a safetensors file: {exc}") from exc
    base = 8 + n_header
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = meta["dtype"]
        if dtype not in _ST_DTYPES:
            raise ConvertError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        start, end = meta["data_offsets"]
        arr = np.frombuffer(raw[base + start : base + end], dtype=_ST_DTYPES[dtype]).reshape(meta["shape"])
        if dtype == "BF16":
            yield name, (arr.astype(np.uint32) << 16).view(np.float32)
        else:
            yield name, arr.astype(np.float32)


# -- hyperparameters -----------------------------------------------------------------------------------
@dataclass(slots=True, frozen=True)
class LlamaHParams:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ctx: int
    rms_eps: float
    rope_theta: float
    tie_embeddings: bool
    bos_id: int | None
    eos_id: int | None

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> LlamaHParams:
        archs = cfg.get("architectures") or []
        if not any(a in SUPPORTED_ARCHITECTURES for a in archs) and cfg.get("model_type") != "llama":
            raise ConvertError(
                f"unsupported architecture {archs or cfg.get('model_type')!r}; "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if cfg.get("rope_scaling"):
            raise ConvertError(f"rope_scaling {cfg['rope_scaling']!r} is not supported by this converter")
        if cfg.get("sliding_window") and cfg.get("use_sliding_window", True) and "Mistral" in str(archs):
            raise ConvertError("sliding-window attention is not supported by this converter")
        try:
            n_embd = int(cfg["hidden_size"])
            n_head = int(cfg["num_attention_heads"])
            eos = cfg.get("eos_token_id")
            return cls(
                n_vocab=int(cfg["vocab_size"]),
                n_embd=n_embd,
                n_layer=int(cfg["num_hidden_layers"]),
                n_ff=int(cfg["intermediate_size"]),
                n_head=n_head,
                n_head_kv=int(cfg.get("num_key_value_heads") or n_head),
                head_dim=int(cfg.get("head_dim") or n_embd // n_head),
                n_ctx=int(cfg.get("max_position_embeddings", 4096)),
                rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_theta=float(cfg.get("rope_theta", 10000.0)),
                tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                bos_id=cfg.get("bos_token_id"),
                eos_id=eos[0] if isinstance(eos, list) else eos,
            )
        except KeyError as exc:
            raise ConvertError(f"config.json lacks {exc.args[0]!r}") from exc


def _permute(w: npt.NDArray[np.float32], n_head: int) -> npt.NDArray[np.float32]:
    """HF's rotate-half q/k rows -> llama.cpp's interleaved rope layout (as convert_hf_to_gguf.py)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# -- tokenizers ------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Vocab:
    model: str  # tokenizer.ggml.model: "llama" or "gpt2"
    tokens: list[bytes]
    types: list[int]
    scores: list[float] | None = None
    merges: list[str] | None = None
    pre: str | None = None
    specials: dict[str, int] = field(default_factory=dict)
    add_bos: bool = True
    chat_template: str | None = None


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _proto_fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message (varint, fixed32/64, bytes)."""
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(buf, i)
            yield num, wire, value
        elif wire == 1:
            yield num, wire, buf[i : i + 8]
            i += 8
        elif wire == 2:
            n, i = _read_varint(buf, i)
            yield num, wire, buf[i : i + n]
            i += n
        elif wire == 5:
            yield num, wire, buf[i : i + 4]
            i += 4
        else:
            raise ConvertError(f"tokenizer.model: unsupported protobuf wire type {wire}")


def read_sentencepiece(path: Path) -> list[tuple[bytes, float, int]]:
    """(piece, score, type) of a SentencePiece ModelProto; types match gguf.TokenType."""
    pieces: list[tuple[bytes, float, int]] = []
    try:
        for num, wire, value in _proto_fields(path.read_bytes()):
            if num != 1 or wire != 2:
                continue
            piece, score, kind = b"", 0.0, 1
            for pnum, pwire, pval in _proto_fields(value):
                if pnum == 1 and pwire == 2:
                    piece = pval
                elif pnum == 2 and pwire == 5:
                    (score,) = struct.unpack("<f", pval)
                elif pnum == 3 and pwire == 0:
                    kind = pval
            pieces.append((piece, score, kind))
    except (IndexError, struct.error) as exc:
        raise ConvertError(f"{path} is not a SentencePiece model") from exc
    if not pieces:
        raise ConvertError(f"{path} holds no SentencePiece pieces")
    return pieces


def _token_content(tok: Any) -> str | None:
    if isinstance(tok, dict):
        content = tok.get("content")
        return str(content) if content is not None else None
    return str(tok) if tok is not None else None


def _spm_vocab(path: Path, hp: LlamaHParams) -> Vocab:
    pieces = read_sentencepiece(path)
    tokens = [p for p, _, _ in pieces]
    scores = [s for _, s, _ in pieces]
    types = [t for _, _, t in pieces]
    specials = {"unk": next((i for i, t in enumerate(types) if t == 2), 0)}
    specials["bos"] = hp.bos_id if hp.bos_id is not None else 1
    specials["eos"] = hp.eos_id if hp.eos_id is not None else 2
    return Vocab("llama", tokens, types, scores=scores, specials=specials, add_bos=True)


def _detect_pre(pre_tok: dict[str, Any] | None) -> str:
    if not pre_tok:
        raise ConvertError("tokenizer.json has no pre_tokenizer: only byte-level BPE is supported")
    steps = pre_tok.get("pretokenizers", [pre_tok]) if pre_tok.get("type") == "Sequence" else [pre_tok]
    splits = [s for s in steps if s.get("type") == "Split"]
    levels = [s for s in steps if s.get("type") == "ByteLevel"]
    if not levels:
        raise ConvertError("tokenizer.json is not byte-level BPE: only byte-level BPE is supported")
    if not splits and levels[0].get("use_regex", True):
        return "gpt-2"
    if len(splits) == 1 and splits[0].get("pattern", {}).get("Regex") == _LLAMA3_REGEX:
        return "llama-bpe"
    raise ConvertError("tokenizer.json uses a pre-tokenizer this converter does not know (GPT-2, Llama 3)")


def _bpe_vocab(path: Path, tok_cfg: dict[str, Any], hp: LlamaHParams) -> Vocab:
    import gguf

    data = json.loads(path.read_text(encoding="utf-8"))
    model = data.get("model", {})
    if model.get("type") != "BPE":
        raise ConvertError(f"tokenizer.json model {model.get('type')!r} is not supported (only BPE)")
    if model.get("byte_fallback"):
        raise ConvertError("SentencePiece-style tokenizer.json (byte_fallback): provide tokenizer.model")
    pre = _detect_pre(data.get("pre_tokenizer"))
    vocab: dict[str, int] = dict(model["vocab"])
    added = {t["content"]: t for t in data.get("added_tokens", [])}
    for content, t in added.items():
        vocab[content] = int(t["id"])
    n = max(hp.n_vocab, max(vocab.values()) + 1)
    tokens = [f"[PAD{i}]".encode() for i in range(n)]
    types = [int(gguf.TokenType.UNUSED)] * n
    for text, idx in vocab.items():
        tokens[idx] = text.encode("utf-8")
        if text in added:
            types[idx] = int(
                gguf.TokenType.CONTROL if added[text].get("special") else gguf.TokenType.USER_DEFINED
            )
        else:
            types[idx] = int(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    specials: dict[str, int] = {}
    for key, hp_id in (("bos", hp.bos_id), ("eos", hp.eos_id)):
        content = _token_content(tok_cfg.get(f"{key}_token"))
        if content is not None and content in vocab:
            specials[key] = vocab[content]
        elif hp_id is not None:
            specials[key] = int(hp_id)
    post = json.dumps(data.get("post_processor") or {})
    bos_text = next((t for t, i in vocab.items() if i == specials.get("bos")), None)
    add_bos = bool(tok_cfg.get("add_bos_token", bos_text is not None and json.dumps(bos_text) in post))
    return Vocab("gpt2", tokens, types, merges=merges, pre=pre, specials=specials, add_bos=add_bos)


def read_vocab(hf_dir: Path, hp: LlamaHParams) -> Vocab:
    tok_cfg_path = hf_dir / "tokenizer_config.json"
    tok_cfg: dict[str, Any] = json.loads(tok_cfg_path.read_text()) if tok_cfg_path.is_file() else {}
    if (hf_dir / "tokenizer.model").is_file():
        vocab = _spm_vocab(hf_dir / "tokenizer.model", hp)
    elif (hf_dir / "tokenizer.json").is_file():
        vocab = _bpe_vocab(hf_dir / "tokenizer.json", tok_cfg, hp)
    else:
        raise ConvertError(f"{hf_dir} has neither tokenizer.model nor tokenizer.json")
    template = tok_cfg.get("chat_template")
    if isinstance(template, str):
        vocab.chat_template = template
    if len(vocab.tokens) < hp.n_vocab:
        raise ConvertError(f"tokenizer has {len(vocab.tokens)} tokens, config.json vocab_size {hp.n_vocab}")
    return vocab


# -- the conversion --------------------------------------------------------------------------------------
def convert_hf(
    hf_dir: str | Path,
    out_path: str | Path,
    outtype: str = "f16",
    progress: Callable[[int, int, str], None] | None = None,
) -> ConvertResult:
    """Write a GGUF of a Hugging Face llama checkpoint; `progress(done, total, tensor_name)`."""
    import gguf

    src = Path(hf_dir)
    out = Path(out_path)
    if outtype not in OUT_TYPES:
        raise ConvertError(f"unknown output type {outtype!r}; known: {', '.join(OUT_TYPES)}")
    if not (src / "config.json").is_file():
        raise ConvertError(f"{src} is not a Hugging Face model directory (no config.json)")
    hp = LlamaHParams.from_config(json.loads((src / "config.json").read_text()))
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise ConvertError(f"{src} holds no *.safetensors weights")
    vocab = read_vocab(src, hp)
    warnings: list[str] = []
    tensors = _llama_tensors(files, hp, outtype)
    if "output.weight" not in tensors and not hp.tie_embeddings:
        warnings.append("no lm_head.weight: llama.cpp will tie the output to the token embeddings")

    writer = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    _write_metadata(writer, src.name, hp, vocab, outtype)
    total = len(tensors)
    n_params = 0
    for i, (name, arr) in enumerate(tensors.items()):
        writer.add_tensor(name, arr)
        n_params += int(arr.size)
        if progress is not None:
            progress(i + 1, total, name)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return ConvertResult(out, total, n_params, vocab.model, warnings)


def _llama_tensors(files: list[Path], hp: LlamaHParams, outtype: str) -> dict[str, npt.NDArray[Any]]:
    """The checkpoint's tensors under their GGUF names, q/k permuted as llama.cpp lays them out."""
    import gguf

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, hp.n_layer)
    tensors: dict[str, npt.NDArray[Any]] = {}
    for f in files:
        for name, arr in iter_safetensors(f):
            if name.endswith("rotary_emb.inv_freq"):
                continue
            new = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if new is None:
                raise ConvertError(f"tensor {name!r} has no llama GGUF name")
            if name.endswith("q_proj.weight"):
                arr = _permute(arr, hp.n_head)
            elif name.endswith("k_proj.weight"):
                arr = _permute(arr, hp.n_head_kv)
            keep_f32 = outtype == "f32" or arr.ndim == 1
            tensors[new] = arr.astype(np.float32 if keep_f32 else np.float16)
    if "token_embd.weight" not in tensors:
        raise ConvertError("the checkpoint has no model.embed_tokens.weight")
    return tensors


def _write_metadata(writer: Any, name: str, hp: LlamaHParams, vocab: Vocab, outtype: str) -> None:
    """The model's hyperparameters and tokenizer as GGUF keys."""
    import gguf

    writer.add_name(name)
    writer.add_context_length(hp.n_ctx)
    writer.add_embedding_length(hp.n_embd)
    writer.add_block_count(hp.n_layer)
    writer.add_feed_forward_length(hp.n_ff)
    writer.add_head_count(hp.n_head)
    writer.add_head_count_kv(hp.n_head_kv)
    writer.add_rope_dimension_count(hp.head_dim)
    if hp.head_dim != hp.n_embd // hp.n_head:
        writer.add_key_length(hp.head_dim)
        writer.add_value_length(hp.head_dim)
    writer.add_rope_freq_base(hp.rope_theta)
    writer.add_layer_norm_rms_eps(hp.rms_eps)
    writer.add_vocab_size(len(vocab.tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model(vocab.model)
    if vocab.pre is not None:
        writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    if vocab.scores is not None:
        writer.add_token_scores(vocab.scores)
    if vocab.merges is not None:
        writer.add_token_merges(vocab.merges)
    for key, tid in vocab.specials.items():
        getattr(writer, f"add_{key}_token_id")(tid)
    writer.add_add_bos_token(vocab.add_bos)
    if vocab.chat_template:
        writer.add_chat_template(vocab.chat_template)
