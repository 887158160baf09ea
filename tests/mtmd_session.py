"""Drive llama.cpp's `libmtmd` (images and audio into a text model) from llama-cpp-python's ctypes
bindings, with no `Llama` object: load the text model and a context, open the projector on that model,
turn media into bitmaps, tokenize a prompt whose media markers stand for them into chunks, evaluate
the chunks into the context's KV and decode greedily after them.

    with MtmdSession(pair.model, pair.mmproj) as s:
        run = s.generate(f"Describe {s.marker}", [s.media(png_bytes)], n_predict=8)
        run.chunks  # (Chunk("text", 2, 2), Chunk("image", 16, 16), ...)
        run.tokens  # the greedy continuation

What the bindings leave to the caller (each is handled below, where it happens):
- a bitmap, the chunk list and the contexts are C objects to free, in that order of life;
- `mtmd_tokenize` takes the prompt with one marker (`mtmd_default_marker()`, "<__media__>") per
  bitmap, in order, and returns 0, or non-zero for a marker count unlike the bitmaps' or media that
  fails to preprocess;
- `mtmd_helper_bitmap_init_from_buf` tries audio, then stb_image, then (this wheel is built with
  video support) ffprobe/ffmpeg as a subprocess for bytes that are neither: check what the bytes are
  before handing them over;
- a chunk's n_pos (KV positions it takes) can differ from its n_tokens (embeddings): under M-RoPE
  (Qwen2-VL's projectors) an image takes fewer positions than tokens, so decoding goes on from the
  `new_n_past` that `mtmd_helper_eval_chunks` returns, never from a count of tokens;
- `mtmd_helper_eval_chunks` itself switches the context to non-causal attention for the media chunks
  of a projector that wants it (Gemma 3's) and back, and needs the context's n_batch (n_ubatch too, for
  non-causal ones) to hold the largest media chunk whole."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import llama_cpp
import numpy as np
from llama_cpp import mtmd_cpp

CHUNK_KINDS = {
    mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT: "text",
    mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE: "image",
    mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_AUDIO: "audio",
}


@dataclass(frozen=True, slots=True)
class Chunk:
    kind: str  # "text", "image" or "audio"
    n_tokens: int  # text tokens, or the projector's embeddings for a medium
    n_pos: int  # the KV positions it takes
    ids: tuple[int, ...] = ()  # a text chunk's token ids


@dataclass(frozen=True, slots=True)
class Run:
    chunks: tuple[Chunk, ...]
    n_past: int  # the position after the prompt: where generation started
    tokens: tuple[int, ...]
    # each step's most likely tokens, (id, log-probability) best first: how near a tie each choice was
    top: tuple[tuple[tuple[int, float], ...], ...]


class MtmdSession:
    """A text model, one context (one sequence) and the projector opened on the model."""

    def __init__(
        self, model: Path, mmproj: Path, *, n_ctx: int = 1024, n_batch: int = 512, n_threads: int = 1
    ) -> None:
        llama_cpp.llama_backend_init()
        self.n_batch = n_batch
        self.model = llama_cpp.llama_model_load_from_file(
            str(model).encode(), llama_cpp.llama_model_default_params()
        )
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {model}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch  # a non-causal image must fit one micro-batch
        cparams.n_threads = cparams.n_threads_batch = n_threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise RuntimeError("llama.cpp could not create a context")
        mparams = mtmd_cpp.mtmd_context_params_default()
        mparams.use_gpu = False
        mparams.n_threads = n_threads
        mparams.print_timings = False
        # the projector is bound to the text model: mtmd checks the projection's width against it
        self.mtmd = mtmd_cpp.mtmd_init_from_file(str(mmproj).encode(), self.model, mparams)
        if not self.mtmd:
            self.close()
            raise RuntimeError(f"libmtmd could not load {mmproj}")
        self.marker = (mtmd_cpp.mtmd_get_marker(self.mtmd) or mtmd_cpp.mtmd_default_marker()).decode()
        self.vision = bool(mtmd_cpp.mtmd_support_vision(self.mtmd))
        self.audio = bool(mtmd_cpp.mtmd_support_audio(self.mtmd))
        self.sample_rate = int(mtmd_cpp.mtmd_get_audio_sample_rate(self.mtmd))
        self.mrope = bool(mtmd_cpp.mtmd_decode_use_mrope(self.mtmd))

    def close(self) -> None:
        if getattr(self, "mtmd", None):
            mtmd_cpp.mtmd_free(self.mtmd)
            self.mtmd = None
        if getattr(self, "ctx", None):
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def __enter__(self) -> MtmdSession:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def media(self, encoded: bytes) -> int:
        """A bitmap from a file's bytes: audio (WAV, MP3, FLAC, told apart by their magic bytes;
        resampled to the projector's rate, mixed to mono) or else an image (PNG, JPEG, ... through
        stb_image: RGB, any size; the projector's preprocessor resizes it). Its id is the bytes'
        SHA-256 (hex), a key for caching what it encodes to. The caller frees it."""
        buf = (ctypes.c_uint8 * len(encoded)).from_buffer_copy(encoded)
        bitmap = mtmd_cpp.mtmd_helper_bitmap_init_from_buf(self.mtmd, buf, len(encoded), False)
        if not bitmap:
            raise ValueError("libmtmd could not decode the media")
        return int(bitmap)

    def rgb(self, pixels: np.ndarray) -> int:
        """A bitmap from decoded pixels: `pixels` is (height, width, 3) uint8, row-major RGB, the only
        layout mtmd_bitmap_init takes (nx is the width). It has no id unless one is set."""
        height, width, channels = pixels.shape
        assert channels == 3 and pixels.dtype == np.uint8
        data = np.ascontiguousarray(pixels).ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        return int(mtmd_cpp.mtmd_bitmap_init(width, height, data))  # copies the pixels

    def pcm(self, samples: np.ndarray) -> int:
        """A bitmap from audio samples: mono float32 in [-1, 1] at `self.sample_rate` (no resampling
        here, unlike `media`)."""
        data = np.ascontiguousarray(samples, dtype=np.float32)
        return int(
            mtmd_cpp.mtmd_bitmap_init_from_audio(
                len(data), data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            )
        )

    def free(self, bitmaps: Sequence[int]) -> None:
        for bitmap in bitmaps:
            mtmd_cpp.mtmd_bitmap_free(bitmap)

    def _tokenize(self, prompt: str, bitmaps: Sequence[int], add_special: bool) -> int:
        chunks = mtmd_cpp.mtmd_input_chunks_init()
        text = mtmd_cpp.mtmd_input_text()
        raw = prompt.encode()
        text.text, text.text_len = raw, len(raw)
        text.add_special = add_special  # BOS where the model asks for one (not if the prompt has it)
        text.parse_special = True  # control tokens written in the prompt (the template's turns)
        array = (mtmd_cpp.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
        status = mtmd_cpp.mtmd_tokenize(self.mtmd, chunks, ctypes.byref(text), array, len(bitmaps))
        if status != 0:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
            # mtmd.h documents 1 for a marker count unlike the bitmaps' and 2 for a preprocessing
            # failure, but this libmtmd checks the count inside, where any failure returns 2
            raise ValueError(
                f"mtmd_tokenize returned {status}: the prompt's media markers and the bitmaps differ in"
                " number, or a bitmap could not be preprocessed"
            )
        return int(chunks)

    def describe(self, chunks: int) -> tuple[Chunk, ...]:
        out = []
        for i in range(mtmd_cpp.mtmd_input_chunks_size(chunks)):
            chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
            kind = CHUNK_KINDS[mtmd_cpp.mtmd_input_chunk_get_type(chunk)]
            ids: tuple[int, ...] = ()
            if kind == "text":
                n = ctypes.c_size_t()
                ptr = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                ids = tuple(int(ptr[j]) for j in range(n.value))
            n_tokens = int(mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk))
            out.append(Chunk(kind, n_tokens, int(mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk)), ids))
        return tuple(out)

    def generate(
        self, prompt: str, bitmaps: Sequence[int], n_predict: int, *, add_special: bool = True
    ) -> Run:
        """Greedy tokens after `prompt` (a marker per bitmap), from an empty KV. The bitmaps stay the
        caller's: the chunks keep their own preprocessed copy."""
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        chunks = self._tokenize(prompt, bitmaps, add_special)
        try:
            described = self.describe(chunks)
            new_n_past = llama_cpp.llama_pos(0)
            # encodes each media chunk (mtmd_encode_chunk) and decodes its embeddings, decodes the
            # text ones, n_batch at a time; logits only for the last position
            status = mtmd_cpp.mtmd_helper_eval_chunks(
                self.mtmd, self.ctx, chunks, 0, 0, self.n_batch, True, ctypes.byref(new_n_past)
            )
            if status != 0:
                raise RuntimeError(f"mtmd_helper_eval_chunks returned {status}")
        finally:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
        n_past = new_n_past.value
        tokens, top = self._greedy(n_past, n_predict)
        return Run(described, n_past, tokens, top)

    def _greedy(
        self, n_past: int, n_predict: int, n_top: int = 3
    ) -> tuple[tuple[int, ...], tuple[tuple[tuple[int, float], ...], ...]]:
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        try:
            tokens: list[int] = []
            tops: list[tuple[tuple[int, float], ...]] = []
            pos = n_past
            for _ in range(n_predict):
                logits = np.ctypeslib.as_array(
                    llama_cpp.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,)
                )
                logprobs = logits.astype(np.float64) - np.logaddexp.reduce(logits.astype(np.float64))
                best = np.argsort(-logprobs, kind="stable")[:n_top]
                tops.append(tuple((int(i), float(logprobs[i])) for i in best))
                token = int(best[0])
                tokens.append(token)
                if llama_cpp.llama_vocab_is_eog(self.vocab, token):
                    break
                batch.n_tokens = 1
                batch.token[0] = token
                batch.pos[0] = pos  # explicit: after media, positions need not equal the token count
                batch.n_seq_id[0] = 1
                batch.seq_id[0][0] = 0
                batch.logits[0] = True
                if llama_cpp.llama_decode(self.ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed")
                pos += 1
            return tuple(tokens), tuple(tops)
        finally:
            llama_cpp.llama_batch_free(batch)

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        """`special`: control tokens as their text (else they render as nothing)."""
        out = b""
        buf = ctypes.create_string_buffer(256)
        for token in tokens:
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
            out += buf.raw[:n]
        return out.decode("utf-8", "replace")
