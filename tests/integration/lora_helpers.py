"""LoRA adapter GGUFs made in the tests with the `gguf` package, laid out as llama.cpp's
convert_lora_to_gguf.py writes them: `general.type = adapter`, `adapter.type = lora`,
`adapter.lora.alpha`, and per adapted weight `<name>.lora_a` (ne = [n_in, rank]) and `<name>.lora_b`
(ne = [rank, n_out]); numpy shapes are those reversed."""

from __future__ import annotations

import functools
from pathlib import Path

import gguf
import numpy as np

from llmhost.engine.llamacpp.gguf_check import check_file


@functools.cache
def _base_facts(base: Path) -> tuple[str, dict[str, tuple[int, int]]]:
    """The base GGUF's architecture and the (n_in, n_out) of each block's attention query weight, read
    once per file with the engine's header check (0.03 CPU-s for the default model; gguf.GGUFReader
    maps every field of its 262k-token vocabulary as numpy views first, ~11 CPU-s a read)."""
    layout = check_file(base)
    arch = str(layout.metadata["general.architecture"])
    shapes = {
        name: (int(dims[0]), int(dims[1]))
        for name, (dims, _) in layout.tensors.items()
        if name.endswith(".attn_q.weight")
    }
    return arch, shapes


def _attn_q_shapes(base: Path) -> dict[str, tuple[int, int]]:
    """(n_in, n_out) of each block's attention query weight in the base GGUF."""
    return dict(_base_facts(Path(base).resolve())[1])


def base_architecture(base: Path) -> str:
    return _base_facts(Path(base).resolve())[0]


def write_adapter(
    out: Path,
    base: Path,
    seed: int,
    rank: int = 4,
    std: float = 0.05,
    zero: bool = False,
    arch: str | None = None,
    shape_off_by: int = 0,
    alpha: float | None = None,
) -> Path:
    """A random low-rank adapter over every attention query weight of `base` (all zeros with `zero`:
    it must change nothing). `arch` / `shape_off_by` make one for another model, which llama.cpp refuses.
    `alpha`: adapter.lora.alpha (default the rank: a scale alpha / rank of 1; 0: not written)."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(out), arch or base_architecture(base))
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    if alpha != 0:
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank if alpha is None else alpha))
    for name, (n_in, n_out) in sorted(_attn_q_shapes(base).items()):
        stem = name.removesuffix(".weight")
        a = rng.normal(0.0, std, size=(rank, n_in + shape_off_by)).astype(np.float32)
        b = rng.normal(0.0, std, size=(n_out, rank)).astype(np.float32)
        if zero:
            a[:] = 0.0
            b[:] = 0.0
        writer.add_tensor(f"{stem}.weight.lora_a", a)
        writer.add_tensor(f"{stem}.weight.lora_b", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def sample_adapters(out: Path, base: Path, extra: bool = False) -> dict[str, Path]:
    """The LoRA tests' adapters for `base`: `sql` and `poet` (random, std 0.15), `bad` (shapes another
    model's) and, with `extra`, `third`."""
    files = {
        "sql": write_adapter(out / "sql.gguf", base, seed=1, std=0.15),
        "poet": write_adapter(out / "poet.gguf", base, seed=2, std=0.15),
        "bad": write_adapter(out / "bad.gguf", base, seed=3, shape_off_by=3),
    }
    if extra:
        files["third"] = write_adapter(out / "third.gguf", base, seed=4, std=0.15)
    return files
