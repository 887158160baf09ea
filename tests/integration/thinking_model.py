"""A tiny Qwen3-architecture GGUF that thinks on cue: Qwen3's real chat template, SmolLM2's tokenizer
with `<think>` and `</think>` added, and weights that make its greedy output a fixed script.

tests/tinymodels.py builds random-weight models whose output is noise; a test of the thought's split
needs an output that thinks first, whatever API asks, so this one is written by hand. The template is
ggml-org/llama.cpp's models/templates/Qwen-Qwen3-0.6B.jinja (Qwen/Qwen3-0.6B's own), byte for byte.

Its layers add nothing (each attention and feed-forward output matrix is zero), so the last position's
hidden state is its token's embedding, and the output matrix maps each script token's embedding to the
next script token: after the generation prompt (`...assistant\\n`) it writes

    <think>I think</think>\\n\\nHello<|im_end|>

and after a prompt ending `</think>\\n\\n` (Qwen3's template with `enable_thinking: false`) it writes
`Hello<|im_end|>`. A budget of one thought token gives `<think>I</think>\\n\\nHello`. Any other token is
followed by token 0 (every other logit is 0), so a grammar decides what follows outside the script.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from tests.tinymodels import smollm2_tokenizer

FIXTURES = Path(__file__).parent.parent / "fixtures"
QWEN3_TEMPLATE = FIXTURES / "templates" / "Qwen-Qwen3-0.6B.jinja"

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF = 64, 1, 4, 2, 16, 128
# each token of the script and the one it is followed by (GPT-2 byte-level spellings: Ċ is "\n")
SCRIPT = {
    "Ċ": "<think>",
    "<think>": "I",
    "I": "Ġthink",
    "Ġthink": "</think>",
    "</think>": "ĊĊ",
    "ĊĊ": "Hello",
    "Hello": "<|im_end|>",
}
THOUGHT, ANSWER = "I think", "Hello"
LOGIT = 4.0  # x sqrt(N_EMBD) after the final norm: 32 for the next script token, 0 for every other


def build_thinking_model(path: Path) -> Path:
    """Write the scripted Qwen3 GGUF to `path`."""
    base = smollm2_tokenizer()
    tokens = [*base.tokens, "<think>", "</think>"]
    types = [*base.token_types, int(gguf.TokenType.USER_DEFINED), int(gguf.TokenType.USER_DEFINED)]
    index = {t: i for i, t in enumerate(tokens)}
    n_vocab = len(tokens)
    writer = gguf.GGUFWriter(path, "qwen3")
    writer.add_name("tiny-scripted-qwen3")
    writer.add_context_length(4096)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_tokenizer_model(base.model)
    writer.add_tokenizer_pre(base.pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(base.merges))
    writer.add_bos_token_id(base.bos_id)
    writer.add_eos_token_id(base.eos_id)
    writer.add_chat_template(QWEN3_TEMPLATE.read_text())
    for name, data in _weights(index, n_vocab).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _weights(index: dict[str, int], n_vocab: int) -> dict[str, np.ndarray]:
    """numpy shapes (llama.cpp's ne reversed); the script's tokens own one embedding dimension each."""
    rng = np.random.default_rng(0)
    embd = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    # other tokens: small values in the dimensions no script token owns (their logits stay 0)
    embd[:, len(SCRIPT) :] = rng.normal(0.0, 0.02, (n_vocab, N_EMBD - len(SCRIPT)))
    output = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    for dim, (token, following) in enumerate(SCRIPT.items()):
        embd[index[token]] = 0.0
        embd[index[token], dim] = 1.0
        output[index[following], dim] = LOGIT
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    out: dict[str, np.ndarray] = {
        "token_embd.weight": embd.astype(np.float16),
        "output.weight": output.astype(np.float16),
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
    }
    for i in range(N_LAYER):
        out |= {
            f"blk.{i}.attn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{i}.attn_q.weight": rng.normal(0, 0.2, (q, N_EMBD)).astype(np.float16),
            f"blk.{i}.attn_k.weight": rng.normal(0, 0.2, (kv, N_EMBD)).astype(np.float16),
            f"blk.{i}.attn_v.weight": rng.normal(0, 0.2, (kv, N_EMBD)).astype(np.float16),
            f"blk.{i}.attn_q_norm.weight": np.ones(HEAD_DIM, dtype=np.float32),
            f"blk.{i}.attn_k_norm.weight": np.ones(HEAD_DIM, dtype=np.float32),
            f"blk.{i}.attn_output.weight": np.zeros((N_EMBD, q), dtype=np.float16),
            f"blk.{i}.ffn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": rng.normal(0, 0.2, (N_FF, N_EMBD)).astype(np.float16),
            f"blk.{i}.ffn_up.weight": rng.normal(0, 0.2, (N_FF, N_EMBD)).astype(np.float16),
            f"blk.{i}.ffn_down.weight": np.zeros((N_EMBD, N_FF), dtype=np.float16),
        }
    return out
