"""A multimodal projector (an "mmproj" GGUF) opened with llama.cpp's libmtmd on the loaded text model:
it turns a prompt's text with media markers and the media's bytes into token ids and `MediaSpan`s
(`tokenize`, safe on any thread: llama-server runs it on its HTTP threads too), encodes a span into
embeddings (`encode`) and decodes those into a sequence's KV (`decode`), both on the engine thread.

What libmtmd leaves to its caller, handled where it happens: bytes that are no image nor audio would
go to ffprobe (refused before, `media.sniff`), and so would an image's that stb_image fails to decode
(a corrupt file): the helper is pointed at an empty private folder for ffmpeg's binaries, so no
ffprobe ever parses a request's bytes (measured: with the defaults, a corrupt PNG ran the ffprobe found
on PATH); a bitmap, a chunk list and a chunk are C objects to
free; a projector that wants non-causal attention (Gemma 3's) has `mtmd_helper_decode_image_chunk`
turn it off for the whole context while it decodes, so a medium is decoded in a llama_decode of its
own, whole in one micro-batch, and causal attention is set back even where the helper failed. Under
M-RoPE (Qwen2-VL's family) the helper lays a medium's embeddings over fewer positions, in 2D: the span
takes those positions in the prompt and its embeddings more KV cells (`media.kv_cells`)."""

from __future__ import annotations

import ctypes
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import llama_cpp as lc
import numpy as np
import numpy.typing as npt
from llama_cpp import mtmd_cpp

from llmhost.engine.llamacpp.gguf_check import GGUFError, check_file
from llmhost.engine.media import (
    MEDIA_MARKER,
    MediaError,
    MediaInput,
    MediaKind,
    MediaLimits,
    MediaSpan,
    media_ids,
)
from llmhost.errors import ModelError

log = logging.getLogger(__name__)

_KINDS: dict[int, MediaKind] = {
    mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE: "image",
    mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_AUDIO: "audio",
}


class ProjectorError(ModelError, RuntimeError):
    """The projector cannot serve with this model: not a projector, or made for another model."""


class _Chunk:
    """A copy of one media chunk of libmtmd's (its preprocessed input), freed with this object."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: Any) -> None:
        self.ptr = ptr

    def __del__(self) -> None:
        if self.ptr:
            mtmd_cpp.mtmd_input_chunk_free(self.ptr)
            self.ptr = None


def check_projector(path: str | Path, model_path: str, n_embd: int) -> None:
    """A projector's file, read before libmtmd parses it: a GGUF of architecture `clip` whose
    projection writes the text model's embedding width; ProjectorError naming both files if not."""
    try:
        meta = check_file(path, read_arrays=0).metadata
    except GGUFError as exc:
        raise ProjectorError(f"--mmproj {exc}") from None
    if meta.get("general.architecture") != "clip":
        raise ProjectorError(
            f"--mmproj {path} is not a multimodal projector (its architecture is "
            f"{meta.get('general.architecture')!r}, a projector's is 'clip')"
        )
    widths = {m: meta.get(f"clip.{m}.projection_dim") for m in ("vision", "audio")}
    for modality, width in widths.items():
        if isinstance(width, int) and width != n_embd:
            raise ProjectorError(
                f"--mmproj {path} does not fit the model {model_path}: its {modality} projection writes "
                f"{width}-wide embeddings, the model reads {n_embd}-wide ones (a projector made for "
                "another model)"
            )


class Projector:
    """libmtmd's context for one text model (`model`, llama.cpp's handle, which must outlive it)."""

    def __init__(self, path: str, model: Any, model_path: str, n_threads: int, n_ubatch: int) -> None:
        self.path = path
        self.n_ubatch = n_ubatch
        self.n_embd = int(lc.llama_model_n_embd_inp(model))
        check_projector(path, model_path, self.n_embd)
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = False
        params.n_threads = n_threads
        params.print_timings = False
        self._ctx = mtmd_cpp.mtmd_init_from_file(path.encode(), model, params)
        if not self._ctx:
            raise ProjectorError(
                f"libmtmd could not load the projector {path} for the model {model_path} (made for "
                "another model, or a projector type this llama.cpp lacks; the server log has its reason)"
            )
        marker = mtmd_cpp.mtmd_get_marker(self._ctx) or mtmd_cpp.mtmd_default_marker()
        self.marker = marker.decode()
        self.vision = bool(mtmd_cpp.mtmd_support_vision(self._ctx))
        self.audio = bool(mtmd_cpp.mtmd_support_audio(self._ctx))
        self.sample_rate = int(mtmd_cpp.mtmd_get_audio_sample_rate(self._ctx)) if self.audio else 0
        # where the helper looks for ffprobe/ffmpeg (its video support): a folder of ours, left empty
        self._no_ffmpeg = tempfile.mkdtemp(prefix="llmhost-no-ffmpeg-")
        self._init_opt = mtmd_cpp.mtmd_helper_init_opt_default()
        self._init_opt.video_params.ffmpeg_bin_dir = self._no_ffmpeg.encode()

    @property
    def modalities(self) -> tuple[MediaKind, ...]:
        kinds: list[MediaKind] = []
        if self.vision:
            kinds.append("image")
        if self.audio:
            kinds.append("audio")
        return tuple(kinds)

    # -- requests (any thread) -----------------------------------------------------------------------
    def tokenize(
        self, text: str, media: list[MediaInput], limits: MediaLimits, add_special: bool
    ) -> tuple[list[int], tuple[MediaSpan, ...]]:
        """`text`'s token ids with each marker's medium in its place (as its span's synthetic ids), and
        the spans; MediaError naming the medium that cannot be used, or a marker count unlike the
        media's."""
        if self.marker != MEDIA_MARKER:
            text = text.replace(MEDIA_MARKER, self.marker)
        bitmaps: list[Any] = []
        try:
            for i, medium in enumerate(media):
                bitmaps.append(self._bitmap(i, medium, limits))
        except MediaError:
            for bitmap in bitmaps:
                mtmd_cpp.mtmd_bitmap_free(bitmap)
            raise
        chunks = mtmd_cpp.mtmd_input_chunks_init()
        try:
            inp = mtmd_cpp.mtmd_input_text()
            raw = text.encode()
            inp.text, inp.text_len = raw, len(raw)
            inp.add_special = add_special
            inp.parse_special = True
            array = (mtmd_cpp.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            status = mtmd_cpp.mtmd_tokenize(self._ctx, chunks, ctypes.byref(inp), array, len(bitmaps))
            if status != 0:
                raise MediaError(
                    0,
                    f"the prompt holds {text.count(self.marker)} media markers ({self.marker}) for "
                    f"{len(media)} media, or a medium could not be preprocessed",
                )
            return self._walk(chunks, media)
        finally:
            mtmd_cpp.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd_cpp.mtmd_bitmap_free(bitmap)

    def _bitmap(self, index: int, medium: MediaInput, limits: MediaLimits) -> Any:
        """The medium decoded (pixels, or samples at the projector's rate) and checked against the
        limits; MediaError naming it if it cannot be used here."""
        if medium.kind not in self.modalities:
            takes = " and ".join(self.modalities)
            raise MediaError(index, f"this model takes no {medium.kind} input (its projector takes {takes})")
        buf = (ctypes.c_uint8 * len(medium.data)).from_buffer_copy(medium.data)
        wrapper = mtmd_cpp.mtmd_helper_bitmap_init_from_buf_wrapper(
            self._ctx, buf, len(medium.data), False, self._init_opt
        )
        if wrapper.video_ctx:  # never without an ffprobe to run; a video is no medium here
            mtmd_cpp.mtmd_helper_video_free(wrapper.video_ctx)
        bitmap = wrapper.bitmap
        if not bitmap:
            raise MediaError(index, f"the {medium.kind} could not be decoded (corrupt or truncated bytes)")
        try:
            self._check_size(index, bitmap, limits)
        except MediaError:
            mtmd_cpp.mtmd_bitmap_free(bitmap)
            raise
        return bitmap

    def _check_size(self, index: int, bitmap: Any, limits: MediaLimits) -> None:
        nx, ny = int(mtmd_cpp.mtmd_bitmap_get_nx(bitmap)), int(mtmd_cpp.mtmd_bitmap_get_ny(bitmap))
        if mtmd_cpp.mtmd_bitmap_is_audio(bitmap):
            seconds = nx / self.sample_rate
            if limits.max_audio_seconds and seconds > limits.max_audio_seconds:
                raise MediaError(
                    index,
                    f"the audio lasts {seconds:.1f} s, more than --max-audio-seconds "
                    f"{limits.max_audio_seconds:g}",
                )
        elif limits.max_image_pixels and nx * ny > limits.max_image_pixels:
            raise MediaError(
                index,
                f"the image is {nx}x{ny} = {nx * ny} pixels, more than --max-image-pixels "
                f"{limits.max_image_pixels}",
            )

    def _walk(self, chunks: Any, media: list[MediaInput]) -> tuple[list[int], tuple[MediaSpan, ...]]:
        tokens: list[int] = []
        spans: list[MediaSpan] = []
        n = int(mtmd_cpp.mtmd_input_chunks_size(chunks))
        for i in range(n):
            chunk = mtmd_cpp.mtmd_input_chunks_get(chunks, i)
            kind = int(mtmd_cpp.mtmd_input_chunk_get_type(chunk))
            if kind == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
                count = ctypes.c_size_t()
                ptr = mtmd_cpp.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                tokens.extend(int(ptr[j]) for j in range(count.value))
                continue
            index = len(spans)
            medium = media[index]
            n_tokens = int(mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk))
            n_pos = int(mtmd_cpp.mtmd_input_chunk_get_n_pos(chunk))
            # a non-causal medium's embeddings attend to each other: one micro-batch must hold them all
            if mtmd_cpp.mtmd_decode_use_non_causal(self._ctx, chunk) and n_tokens > self.n_ubatch:
                raise MediaError(
                    index,
                    f"the {medium.kind} takes {n_tokens} embeddings, more than a micro-batch holds "
                    f"({self.n_ubatch}; raise --ubatch-size and --max-batch-tokens)",
                )
            span = MediaSpan(len(tokens), n_pos, n_tokens, _KINDS[kind], medium.sha256, _Chunk(None))
            span.chunk.ptr = mtmd_cpp.mtmd_input_chunk_copy(chunk)
            spans.append(span)
            tokens.extend(media_ids(medium.sha256, n_pos))
        if spans and spans[-1].end == len(tokens):
            # the first token sampled reads the last position's logits, which a medium's decode lacks
            raise MediaError(len(spans) - 1, "the prompt must not end with a medium: put text after it")
        return tokens, tuple(spans)

    # -- the engine thread ---------------------------------------------------------------------------
    def encode(self, span: MediaSpan) -> npt.NDArray[np.float32]:
        """The span's embeddings, (n_tokens, n_embd) float32, a copy of the encoder's output."""
        if mtmd_cpp.mtmd_encode_chunk(self._ctx, span.chunk.ptr) != 0:
            raise RuntimeError(f"libmtmd could not encode the {span.kind} {span.sha256[:12]}")
        ptr = mtmd_cpp.mtmd_get_output_embd(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(span.n_tokens, self.n_embd)).copy()

    def decode(
        self, lctx: Any, span: MediaSpan, embd: npt.NDArray[np.float32], seq_id: int, n_batch: int
    ) -> None:
        """Decode the span's embeddings into `seq_id` at its positions, alone in its llama_decode calls."""
        new_n_past = lc.llama_pos(0)
        data = np.ascontiguousarray(embd, dtype=np.float32)
        try:
            status = mtmd_cpp.mtmd_helper_decode_image_chunk(
                self._ctx,
                lctx,
                span.chunk.ptr,
                data.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                span.start,
                seq_id,
                n_batch,
                ctypes.byref(new_n_past),
                mtmd_cpp.mtmd_helper_post_decode_callback(),
                None,
            )
        finally:
            lc.llama_set_causal_attn(lctx, True)
        if status != 0:
            raise RuntimeError(f"decoding the {span.kind} {span.sha256[:12]} failed ({status})")
        if new_n_past.value != span.end:
            raise RuntimeError(f"the {span.kind} ended at position {new_n_past.value}, not {span.end}")

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            mtmd_cpp.mtmd_free(self._ctx)
            self._ctx = None
        if getattr(self, "_no_ffmpeg", None):
            shutil.rmtree(self._no_ffmpeg, ignore_errors=True)
            self._no_ffmpeg = ""
