"""Quantize a GGUF with llama.cpp's own quantizer (`llama_model_quantize`).

The one module of `optimize` that calls llama.cpp directly: quantizing is an operation on model
files, not serving.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as lc

from llmhost.engine.llamacpp.backend import add_log_listener, init_backend, remove_log_listener
from llmhost.errors import ModelError

# user-facing type name -> llama_ftype
QUANT_TYPES: dict[str, int] = {
    "q4_0": lc.LLAMA_FTYPE_MOSTLY_Q4_0,
    "q4_1": lc.LLAMA_FTYPE_MOSTLY_Q4_1,
    "q5_0": lc.LLAMA_FTYPE_MOSTLY_Q5_0,
    "q5_1": lc.LLAMA_FTYPE_MOSTLY_Q5_1,
    "q8_0": lc.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q2_K": lc.LLAMA_FTYPE_MOSTLY_Q2_K,
    "q3_K_S": lc.LLAMA_FTYPE_MOSTLY_Q3_K_S,
    "q3_K_M": lc.LLAMA_FTYPE_MOSTLY_Q3_K_M,
    "q3_K_L": lc.LLAMA_FTYPE_MOSTLY_Q3_K_L,
    "q4_K_S": lc.LLAMA_FTYPE_MOSTLY_Q4_K_S,
    "q4_K_M": lc.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "q5_K_S": lc.LLAMA_FTYPE_MOSTLY_Q5_K_S,
    "q5_K_M": lc.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "q6_K": lc.LLAMA_FTYPE_MOSTLY_Q6_K,
    "f16": lc.LLAMA_FTYPE_MOSTLY_F16,
    "bf16": lc.LLAMA_FTYPE_MOSTLY_BF16,
    "f32": lc.LLAMA_FTYPE_ALL_F32,
}
# ftypes that leave weights unquantized
_FLOAT_FTYPES = {lc.LLAMA_FTYPE_ALL_F32, lc.LLAMA_FTYPE_MOSTLY_F16, lc.LLAMA_FTYPE_MOSTLY_BF16}
_FTYPE_NAMES = {v: k for k, v in QUANT_TYPES.items()}
# llama.cpp's per-tensor line: "[  12/ 236]  blk.0.attn_q.weight - [...]"
_PROGRESS = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]\s+(\S+)")

# llama.cpp's logger is process-wide: one quantization at a time
_quantize_lock = threading.Lock()

Progress = Callable[[int, int, str], None]


class QuantizeError(ModelError, ValueError):
    """The input cannot be quantized as asked, with the reason."""


@dataclass(slots=True, frozen=True)
class QuantizeResult:
    path: Path
    qtype: str
    in_bytes: int
    out_bytes: int
    seconds: float
    source_type: str


def resolve_qtype(name: str) -> int:
    for key, ftype in QUANT_TYPES.items():
        if key.lower() == name.lower():
            return ftype
    raise QuantizeError(f"unknown quantization type {name!r}; known types: {', '.join(QUANT_TYPES)}")


def check_gguf(path: Path) -> None:
    if not path.exists():
        raise QuantizeError(f"input model {path} does not exist")
    if not path.is_file():
        raise QuantizeError(f"input model {path} is not a file")
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise QuantizeError(f"{path} is not a GGUF file (no GGUF magic); convert it first")


def file_type(path: Path) -> tuple[int | None, bool]:
    """(general.file_type if recorded, whether any 2-D weight is quantized) of a GGUF. Read with the
    engine's header check (0.03 CPU-s for the default model), not gguf's GGUFReader, which indexes
    every metadata string (10.5 CPU-s there, for its 262k-token vocabulary)."""
    import gguf

    from llmhost.engine.llamacpp.gguf_check import GGUFError, check_file

    try:
        layout = check_file(path)
    except GGUFError as exc:
        raise QuantizeError(str(exc)) from None
    recorded = layout.metadata.get("general.file_type")
    ftype = int(recorded) if isinstance(recorded, int) else None
    floats = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16}
    quantized = any(kind not in floats for dims, kind in layout.tensors.values() if len(dims) >= 2)
    return ftype, quantized


def type_name(ftype: int | None, quantized: bool) -> str:
    if ftype is not None and ftype in _FTYPE_NAMES:
        return _FTYPE_NAMES[ftype]
    if ftype is not None:
        return f"ftype {ftype}"
    return "quantized" if quantized else "float"


def _checked_source(src: Path, dst: Path, allow_requantize: bool) -> str:
    """The type of the GGUF `src` (e.g. "ftype 1"), once it may be quantized into `dst`."""
    check_gguf(src)
    try:
        src_ftype, quantized = file_type(src)
    except (ValueError, OSError) as exc:
        raise QuantizeError(f"{src} is not a readable GGUF file: {exc}") from exc
    source = type_name(src_ftype, quantized)
    if quantized and not allow_requantize:
        raise QuantizeError(
            f"{src} is already quantized ({source}); re-quantizing loses quality. "
            "Quantize from an F16/F32 model, or allow re-quantization (--allow-requantize)"
        )
    if src.resolve() == dst.resolve():
        raise QuantizeError("the output must not overwrite the input")
    return source


def quantize(
    in_path: str | Path,
    out_path: str | Path,
    qtype: str,
    allow_requantize: bool = False,
    progress: Progress | None = None,
    n_threads: int = 0,
) -> QuantizeResult:
    """Write `out_path`, a `qtype` copy of the GGUF `in_path`; `progress(done, total, tensor_name)`."""
    src, dst = Path(in_path), Path(out_path)
    ftype = resolve_qtype(qtype)
    source = _checked_source(src, dst, allow_requantize)
    dst.parent.mkdir(parents=True, exist_ok=True)

    init_backend()
    params = lc.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = allow_requantize
    params.nthread = n_threads
    errors: list[str] = []

    def on_log(text: str) -> None:
        m = _PROGRESS.match(text.strip())
        if m and progress is not None:
            progress(int(m.group(1)), int(m.group(2)), m.group(3))
        if "failed" in text or "error" in text.lower():
            errors.append(text.strip())

    t0 = time.perf_counter()
    with _quantize_lock:
        add_log_listener(on_log)
        try:
            rc = lc.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
        finally:
            remove_log_listener(on_log)
    if rc != 0:
        dst.unlink(missing_ok=True)
        reason = "; ".join(errors[-3:]) or f"llama_model_quantize returned {rc}"
        raise QuantizeError(f"quantizing {src} to {qtype} failed: {reason}")
    return QuantizeResult(
        path=dst,
        qtype=qtype,
        in_bytes=src.stat().st_size,
        out_bytes=dst.stat().st_size,
        seconds=time.perf_counter() - t0,
        source_type=source,
    )
