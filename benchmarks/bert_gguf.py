"""A random-weight BERT GGUF at a real model's shape: the cost of a forward pass is the shape's, whatever
the weights, so a benchmark can time a bge-small or an ms-marco MiniLM cross-encoder without
downloading one.

The tokenizer is tests/tinymodels.py's: SmolLM2's GPT-2 BPE vocabulary of 49,152 tokens (real text
tokenizes to real lengths), not BERT's WordPiece of 30,522, so the embedding table is 1.6x a real
BERT's (18.9M parameters at width 384 instead of 11.7M; a row lookup per token, no matmul: it adds
memory, not time). Matrices are F16, norms and biases F32, as tinymodels writes them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.tinymodels import smollm2_tokenizer, write_tokenizer


@dataclass(frozen=True)
class BertShape:
    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_ff: int
    n_ctx: int  # learned positions
    pooling: gguf.PoolingType  # RANK: a cross-encoder, with a one-label classification head


# BAAI/bge-small-en-v1.5 (its config.json): CLS pooling
BGE_SMALL = BertShape("bge-small-en-v1.5", 12, 384, 12, 1536, 512, gguf.PoolingType.CLS)
# cross-encoder/ms-marco-MiniLM-L-6-v2 (its config.json): one label
MINILM_RERANKER = BertShape("ms-marco-MiniLM-L-6-v2", 6, 384, 12, 1536, 512, gguf.PoolingType.RANK)

# BERT's initializer range; with post-sublayer LayerNorms any small spread keeps activations sane
STD = 0.02


def build_bert_gguf(path: Path, shape: BertShape, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    tok = smollm2_tokenizer()
    rerank = shape.pooling == gguf.PoolingType.RANK
    writer = gguf.GGUFWriter(path, "bert")
    writer.add_name(f"random weights at {shape.name}'s shape")
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_layer_norm_eps(1e-12)
    writer.add_causal_attention(False)
    writer.add_pooling_type(shape.pooling)
    writer.add_token_type_count(2)
    write_tokenizer(writer, tok)
    if rerank:  # the pair written [BOS] query [EOS] [SEP] document [EOS], as llama.cpp does for BERTs
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(True)
        writer.add_add_sep_token(True)
        writer.add_sep_token_id(0)

    def add(name: str, ne: tuple[int, ...], ones: bool = False, f32: bool = False) -> None:
        shape_np = tuple(reversed(ne))  # ne in llama.cpp's order, ne0 first
        data = np.ones(shape_np) if ones else rng.normal(0.0, STD, shape_np)
        writer.add_tensor(name, data.astype(np.float32 if len(ne) == 1 or f32 else np.float16))

    d, ff = shape.n_embd, shape.n_ff
    add("token_embd.weight", (d, len(tok.tokens)))
    add("token_types.weight", (d, 2), f32=True)
    add("position_embd.weight", (d, shape.n_ctx), f32=True)
    add("token_embd_norm.weight", (d,), ones=True)
    add("token_embd_norm.bias", (d,))
    for i in range(shape.n_layer):
        for m in ("q", "k", "v"):
            add(f"blk.{i}.attn_{m}.weight", (d, d))
            add(f"blk.{i}.attn_{m}.bias", (d,))
        add(f"blk.{i}.attn_output.weight", (d, d))
        add(f"blk.{i}.attn_output.bias", (d,))
        add(f"blk.{i}.attn_output_norm.weight", (d,), ones=True)
        add(f"blk.{i}.attn_output_norm.bias", (d,))
        add(f"blk.{i}.ffn_up.weight", (d, ff))
        add(f"blk.{i}.ffn_up.bias", (ff,))
        add(f"blk.{i}.ffn_down.weight", (ff, d))
        add(f"blk.{i}.ffn_down.bias", (d,))
        add(f"blk.{i}.layer_output_norm.weight", (d,), ones=True)
        add(f"blk.{i}.layer_output_norm.bias", (d,))
    if rerank:
        add("cls.weight", (d, d))
        add("cls.bias", (d,))
        # a wider spread than the rest: the scores should differ from document to document
        data = rng.normal(0.0, 1.0, (1, d)).astype(np.float16)
        writer.add_tensor("cls.output.weight", data)
        add("cls.output.bias", (1,))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
