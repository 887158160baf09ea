"""Engine limits: every bound the scheduler enforces has a name here."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Literal, get_args

from llmhost.engine.lora import AdapterSpec, check_unique

log = logging.getLogger(__name__)
SchedulePolicy = Literal["fewest-left", "arrival", "cached-first"]
SCHEDULE_POLICIES: tuple[str, ...] = get_args(SchedulePolicy)
# llama.cpp's KV cache types (common/arg.cpp's kv_cache_types), unquantized first
CacheType = Literal["f16", "bf16", "f32", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


def available_cpus() -> int:
    """CPUs this process may run on (affinity), not the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(slots=True, frozen=True)
class EngineConfig:
    # sequences that hold KV and decode together
    max_concurrent: int = 8
    # requests allowed to wait for a sequence slot; one more is refused (429)
    max_queue: int = 64
    # prompt tokens one request may send
    max_input_tokens: int = 2048
    # prompt + generated tokens of one sequence
    max_total_tokens: int = 4096
    # tokens one llama_decode carries: every running sequence's next token + chunks of prompts
    max_batch_tokens: int = 512
    # llama.cpp's physical batch (n_ubatch, llama-server's --ubatch-size): a decode is computed in
    # micro-batches of this many tokens. 0: llama.cpp's default, 512, at most the logical batch
    ubatch_size: int = 0
    # KV streams beyond the running ones that only keep finished requests' KV for prefix reuse (each
    # max_total_tokens cells); a finished request's KV stays in its own stream (slot) in any case
    prefix_cache_seqs: int = 0
    # reuse KV already computed for a prompt's prefix (in a slot, a running sequence or host memory);
    # off: every prompt is computed whole (vLLM's --no-enable-prefix-caching)
    prefix_caching: bool = True
    # a waiting prompt holds back while another prompt is computing a prefix it shares (>= this many
    # tokens more than already cached), so it copies that KV instead of prefilling it again
    prefix_wait_min_tokens: int = 32
    # which waiting request gets a free sequence slot first: "fewest-left" (fewest prompt tokens left to
    # compute), "arrival" (earliest), "cached-first" (most prompt tokens already cached)
    schedule_policy: SchedulePolicy = "fewest-left"
    # sequences batch work (a request of priority > 0) never takes: kept free for interactive requests,
    # so one arriving while a batch fills the engine does not wait for a batch request to finish
    # (at most max_concurrent - 1: a batch always has a sequence)
    interactive_slots: int = 1
    # speculative decoding of greedy requests: "" (off) or "ngram" (prompt lookup), with up to
    # `draft_tokens` guesses verified per step, looked up by n-grams of `ngram_size` down to 2 tokens
    speculative: str = ""
    draft_tokens: int = 12
    # "ngram": each sequence's draft length follows its recent acceptance, up to `draft_tokens`
    # (none while its guesses keep failing); off: always up to `draft_tokens`
    adaptive_draft: bool = True
    # "draft": a smaller GGUF with the same vocabulary proposes the tokens
    draft_model: str = ""
    # a multimodal projector GGUF (llama.cpp's mmproj) loaded with the model: images and audio in prompts
    mmproj: str = ""
    ngram_size: int = 3
    n_threads: int = 0  # 0: available_cpus()
    n_threads_batch: int = 0  # 0: same as n_threads
    flash_attn: bool = False
    # the KV cache's element types, llama.cpp's names (--cache-type-k/-v): a quantized V needs flash
    # attention, which reads V row by row; f16 is llama.cpp's default
    cache_type_k: CacheType = "f16"
    cache_type_v: CacheType = "f16"
    # sliding-window layers (Gemma 3, gpt-oss, Mistral-SWA, Cohere) keep only their window (False,
    # llama.cpp's default: 5 of Gemma 3's 6 layers at 1/8 of a 4,096-token stream) or every position
    # (True). Windowed, a prompt sharing a shorter prefix of a cached sequence than its whole KV is
    # served from an SWA checkpoint (`swa_checkpoints`); speculative decoding turns it on (a rolled-back
    # guess would take window cells with it)
    swa_full: bool = False
    # SWA checkpoints a sequence keeps (llama-server's --swa-checkpoints): its sliding-window cells
    # saved in host memory at prompt chunk starts, each up to the window and a micro-batch of cells
    swa_checkpoints: int = 3
    # how llama.cpp reads the weights: "auto" (its default), "mmap" or "read" (no mmap)
    load_mode: str = "auto"
    # llama.cpp's extra buffer types: weights repacked at load for this CPU's kernels
    repack: bool = True
    # each prompt chunk decoded in a llama_decode of its own, apart from other prompts and from the
    # decoding sequences: llama.cpp's CPU kernels compute a token's row differently with the rows beside
    # it in a micro-batch, so a prompt batched with others gets other logits than alone (see
    # docs/guides/lora.md, "Cached prompts and mixed batches")
    isolate_prompts: bool = False
    # seconds a request may wait for a sequence slot / take in all before it is dropped (0: no limit)
    queue_timeout_s: float = 0.0
    request_timeout_s: float = 0.0
    # consecutive steps failing with an unexpected error before the engine declares itself dead
    max_step_failures: int = 3
    # a step running longer than this is logged with what it held
    slow_step_s: float = 30.0
    # a saved prefix KV state (`engine.kv.prefix_state` file) restored at load into the prefix cache
    prefix_state_path: str = ""
    # MiB of host memory for KV states of sequences that left the context (the second cache tier):
    # -1 sizes it from the memory available at start, 0 turns it off
    prompt_cache_mb: int = -1
    # MiB the whole process is meant to fit in (an endpoint copy's memory_mb): -1 above takes at most what
    # the weights, the KV cache and the process leave of it; 0: no such bound
    memory_mb: int = 0
    # LoRA adapters loaded beside the model (lora.AdapterSpec), selected per request
    adapters: tuple[AdapterSpec, ...] = ()
    # most adapters kept loaded: idle ones beyond it are freed, least recently used first, and loaded
    # again when a request selects them; 0: every known adapter stays loaded
    max_loras: int = 0

    def __post_init__(self) -> None:
        self._check_modes()
        self._check_bounds()
        self._check_limits_fit()

    def _check_modes(self) -> None:
        """Speculation and load mode: known values, consistent with each other."""
        if self.speculative not in SPECULATIVE_MODES:
            raise ValueError(f"speculative must be one of {SPECULATIVE_MODES}, got {self.speculative!r}")
        if (self.speculative == "draft") != bool(self.draft_model):
            raise ValueError(
                "speculative='draft' needs draft_model, and draft_model needs speculative='draft'"
            )
        if self.draft_tokens < 1 or self.ngram_size < 2:
            raise ValueError(
                f"draft_tokens must be >= 1 and ngram_size >= 2, got {self.draft_tokens}, {self.ngram_size}"
            )
        if self.load_mode not in LOAD_MODES:
            raise ValueError(f"load_mode must be one of {', '.join(LOAD_MODES)}, got {self.load_mode!r}")
        check_unique(self.adapters)
        self._check_cache_types()
        if self.interactive_slots < 0:
            raise ValueError(f"interactive_slots must be >= 0, got {self.interactive_slots}")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(
                f"schedule_policy must be one of {', '.join(SCHEDULE_POLICIES)}, got {self.schedule_policy!r}"
            )
        if self.speculative and not self.swa_full:
            log.debug(
                "speculative=%r keeps sliding-window layers whole (swa_full): a rolled-back guess "
                "would take window cells with it",
                self.speculative,
            )
            object.__setattr__(self, "swa_full", True)  # frozen: settled once, before any use

    def _check_cache_types(self) -> None:
        for name, value in (("cache_type_k", self.cache_type_k), ("cache_type_v", self.cache_type_v)):
            if value not in CACHE_TYPES:
                raise ValueError(f"{name} must be one of {', '.join(CACHE_TYPES)}, got {value!r}")
        if self.cache_type_v not in UNQUANTIZED_CACHE_TYPES and not self.flash_attn:
            raise ValueError(
                f"cache_type_v {self.cache_type_v} (a quantized V cache) needs flash attention: "
                "turn on --flash-attn or use --cache-type-v f16"
            )

    def _check_bounds(self) -> None:
        """Each number within its own bound."""
        positive = {
            "max_concurrent": self.max_concurrent,
            "max_input_tokens": self.max_input_tokens,
            "max_total_tokens": self.max_total_tokens,
            "max_batch_tokens": self.max_batch_tokens,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        non_negative: dict[str, float] = {
            "max_queue": self.max_queue,
            "prefix_cache_seqs": self.prefix_cache_seqs,
            "prefix_wait_min_tokens": self.prefix_wait_min_tokens,
            "ubatch_size": self.ubatch_size,
            "n_threads": self.n_threads,
            "n_threads_batch": self.n_threads_batch,
            "queue_timeout_s": self.queue_timeout_s,
            "request_timeout_s": self.request_timeout_s,
            "memory_mb": self.memory_mb,
            "max_loras": self.max_loras,
            "swa_checkpoints": self.swa_checkpoints,
        }
        for name, bound in non_negative.items():
            if not bound >= 0:
                raise ValueError(f"{name} must be >= 0, got {bound}")
        if self.prompt_cache_mb < -1:
            raise ValueError(
                f"prompt_cache_mb must be >= -1 (-1: sized from free memory), got {self.prompt_cache_mb}"
            )
        if self.max_step_failures < 1 or not self.slow_step_s > 0:
            raise ValueError(
                f"max_step_failures must be >= 1 and slow_step_s > 0, got {self.max_step_failures}, "
                f"{self.slow_step_s}"
            )

    def _check_limits_fit(self) -> None:
        """The limits together: a prompt leaves room to generate, the sequences fit llama.cpp's."""
        if self.max_input_tokens >= self.max_total_tokens:
            raise ValueError(
                f"max_input_tokens ({self.max_input_tokens}) must be below max_total_tokens "
                f"({self.max_total_tokens}) so at least one token can be generated"
            )
        if self.max_batch_tokens < self.max_concurrent:
            raise ValueError(
                f"max_batch_tokens ({self.max_batch_tokens}) must be >= max_concurrent "
                f"({self.max_concurrent}): every running sequence decodes one token per step"
            )
        if self.ubatch_size > self.llama_n_batch:
            raise ValueError(
                f"ubatch_size ({self.ubatch_size}) must be <= the batch llama.cpp is given, "
                f"max_batch_tokens ({self.max_batch_tokens}; at least max_concurrent + prefix_cache_seqs = "
                f"{self.n_seq_max}): a micro-batch is part of a batch"
            )
        if self.max_concurrent + self.prefix_cache_seqs > LLAMA_MAX_SEQ:
            raise ValueError(
                f"max_concurrent + prefix_cache_seqs = {self.max_concurrent + self.prefix_cache_seqs} "
                f"exceeds llama.cpp's {LLAMA_MAX_SEQ} sequences"
            )

    @property
    def threads(self) -> int:
        return self.n_threads or available_cpus()

    @property
    def threads_batch(self) -> int:
        return self.n_threads_batch or self.threads

    @property
    def n_seq_max(self) -> int:
        return self.max_concurrent + self.prefix_cache_seqs

    @property
    def llama_n_batch(self) -> int:
        """llama.cpp's batch: the engine's `max_batch_tokens`, but never fewer than its sequences. llama.cpp
        reserves a one-token-per-sequence graph at context creation, whose outputs must fit its batch (it
        aborts the process otherwise: `GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)`); the engine
        still puts at most `max_batch_tokens` tokens in a decode."""
        return max(self.max_batch_tokens, self.n_seq_max)

    def prompt_logits_rows(self, n_vocab: int) -> int:
        """Prompt positions whose logits one step keeps for prompt logprobs: the rows of an `n_vocab`-token
        vocabulary that LOGITS_ROWS_BYTES holds (16 at Gemma 3's 262,144 tokens, 32 at Llama 3's), at
        least one, at most a batch. A prompt with logprobs is computed that many positions a step."""
        return max(1, min(self.llama_n_batch, LOGITS_ROWS_BYTES // (FLOAT32_BYTES * n_vocab)))

    def guess_rows(self, n_vocab: int) -> int:
        """Logits rows of the running sequences' speculative guesses in one step: `draft_tokens` each
        (none without speculation), as many as llama.cpp's batch holds beside the sequences' own rows
        and the prompt rows."""
        if not self.speculative:
            return 0
        room = self.llama_n_batch - self.max_concurrent - self.prompt_logits_rows(n_vocab)
        return max(0, min(self.max_concurrent * self.draft_tokens, room))

    def llama_n_outputs(self, n_vocab: int) -> int:
        """llama.cpp's n_outputs_max, the most logits rows a decode computes: each sequence's next token
        and its guesses to verify, and the prompt rows above. llama.cpp sizes its compute buffer for
        them and keeps its logits buffer at the most a decode asked for; by default it would take a
        whole batch of rows (512: 1 GiB more RSS after one prompt scored at Gemma 3's vocabulary)."""
        rows = self.max_concurrent + self.guess_rows(n_vocab) + self.prompt_logits_rows(n_vocab)
        # at least a row per stream: llama.cpp reserves them at the context's creation
        return min(self.llama_n_batch, max(self.n_seq_max, rows))

    @property
    def llama_n_ubatch(self) -> int:
        """llama.cpp's micro-batch: `ubatch_size`, else llama.cpp's default (512) within the batch."""
        return self.ubatch_size or min(self.llama_n_batch, LLAMA_DEFAULT_UBATCH)

    @property
    def n_ctx(self) -> int:
        """KV cells: a stream of max_total_tokens for every slot (running sequences and extra cached)."""
        return self.n_seq_max * self.max_total_tokens


LOAD_MODES = ("auto", "mmap", "read")
UNQUANTIZED_CACHE_TYPES = ("f16", "bf16", "f32")
CACHE_TYPES: tuple[str, ...] = get_args(CacheType)
SPECULATIVE_MODES = ("", "ngram", "draft")

# llama.cpp's LLAMA_MAX_SEQ
LLAMA_MAX_SEQ = 256
# the logits of prompt positions a step keeps for prompt logprobs (twice: llama.cpp's compute buffer and
# the rows it hands back), within what a copy's memory estimate leaves llama.cpp's buffers
LOGITS_ROWS_BYTES = 16 * 2**20
FLOAT32_BYTES = 4
# an embeddings server's input limit where none is given (llama-server's: a decode holds a whole input)
EMBED_MAX_INPUT_TOKENS = 512
# llama.cpp's default n_ubatch (llama_context_default_params, llama-server's --ubatch-size)
LLAMA_DEFAULT_UBATCH = 512
