"""Tiny random-weight Hugging Face llama checkpoints (safetensors + byte-level BPE tokenizer.json)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt

CORPUS = (
    "the quick brown fox jumps over the lazy dog . the dog sleeps in the sun and the fox runs "
    "into the forest where the trees are tall and the river is cold . a cat watches the birds "
    "that sing in the morning , then the cat sleeps under the old table of the house ."
)
BOS, EOS = "<s>", "</s>"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def train_bpe(text: str, n_merges: int) -> tuple[dict[str, int], list[str]]:
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    words = Counter(
        tuple(table[b] for b in (w if i == 0 else " " + w).encode()) for i, w in enumerate(text.split())
    )
    merges: list[str] = []
    for _ in range(n_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for a, b in itertools.pairwise(word):
                pairs[(a, b)] += count
        if not pairs:
            break
        (a, b), _ = pairs.most_common(1)[0]
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
        merged: Counter[tuple[str, ...]] = Counter()
        for word, count in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return vocab, merges


def make_tiny_hf(
    out: Path,
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 256,
    vocab_size: int = 320,
) -> Path:
    """Write config.json, model.safetensors, tokenizer.json, tokenizer_config.json under `out`."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    vocab, merges = train_bpe(CORPUS, 40)
    bos, eos = len(vocab), len(vocab) + 1
    assert eos < vocab_size
    tokenizer = {
        "version": "1.0",
        "added_tokens": [
            {"id": bos, "content": BOS, "special": True},
            {"id": eos, "content": EOS, "special": True},
        ],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": BOS}}]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
    }
    (out / "tokenizer.json").write_text(json.dumps(tokenizer))
    (out / "tokenizer_config.json").write_text(json.dumps({"bos_token": BOS, "eos_token": EOS}))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": n_embd,
        "intermediate_size": n_ff,
        "num_hidden_layers": n_layer,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_head_kv,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab_size,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "tie_word_embeddings": False,
    }
    (out / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head

    def w(*shape: int, std: float) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    tensors = {
        "model.embed_tokens.weight": w(vocab_size, n_embd, std=1.0),
        "model.norm.weight": 1 + w(n_embd, std=0.1),
        "lm_head.weight": w(vocab_size, n_embd, std=0.8),
    }
    for i in range(n_layer):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": 1 + w(n_embd, std=0.1),
            p + "post_attention_layernorm.weight": 1 + w(n_embd, std=0.1),
            p + "self_attn.q_proj.weight": w(n_head * head_dim, n_embd, std=0.15),
            p + "self_attn.k_proj.weight": w(n_head_kv * head_dim, n_embd, std=0.15),
            p + "self_attn.v_proj.weight": w(n_head_kv * head_dim, n_embd, std=0.1),
            p + "self_attn.o_proj.weight": w(n_embd, n_head * head_dim, std=0.1),
            p + "mlp.gate_proj.weight": w(n_ff, n_embd, std=0.1),
            p + "mlp.up_proj.weight": w(n_ff, n_embd, std=0.1),
            p + "mlp.down_proj.weight": w(n_embd, n_ff, std=0.1),
        }
    save_file(tensors, str(out / "model.safetensors"))
    return out


def reference_logits(hf_dir: Path, tokens: list[int]) -> npt.NDArray[np.float64]:
    """Logits of every position from a plain numpy forward pass of the HF llama model."""
    from safetensors.numpy import load_file

    cfg = json.loads((hf_dir / "config.json").read_text())
    t = {k: v.astype(np.float64) for k, v in load_file(str(hf_dir / "model.safetensors")).items()}
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg["hidden_size"] // n_head
    eps = cfg["rms_norm_eps"]
    n = len(tokens)

    def norm(x: npt.NDArray[np.float64], g: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, d, 2) / d)
    ang = np.outer(np.arange(n), inv)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:  # (heads, n, d), rotate-half
        half = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], -1)
        return x * cos + half * sin

    x = t["model.embed_tokens.weight"][tokens]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = norm(x, t[p + "input_layernorm.weight"])
        q = rope((h @ t[p + "self_attn.q_proj.weight"].T).reshape(n, n_head, d).transpose(1, 0, 2))
        k = rope((h @ t[p + "self_attn.k_proj.weight"].T).reshape(n, n_kv, d).transpose(1, 0, 2))
        v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(n, n_kv, d).transpose(1, 0, 2)
        k, v = np.repeat(k, n_head // n_kv, 0), np.repeat(v, n_head // n_kv, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d) + mask
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        x = x + (a @ v).transpose(1, 0, 2).reshape(n, -1) @ t[p + "self_attn.o_proj.weight"].T
        h = norm(x, t[p + "post_attention_layernorm.weight"])
        g = h @ t[p + "mlp.gate_proj.weight"].T
        up = h @ t[p + "mlp.up_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * up) @ t[p + "mlp.down_proj.weight"].T
    out: npt.NDArray[np.float64] = norm(x, t["model.norm.weight"]) @ t["lm_head.weight"].T
    return out
