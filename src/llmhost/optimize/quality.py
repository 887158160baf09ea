"""Quality checks of a GGUF: perplexity on a shipped text sample, greedy agreement with a base model."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
import numpy.typing as npt

from llmhost import __version__
from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.prefix_cache import KvTrim
from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.engine.sample.sampling import row_log_z

SAMPLE_NAME = "sample.txt"
# short, varied prompts: greedy continuations of these are compared between two models
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n",
    "The three primary colors are",
    "To make a cup of tea, first",
    "Water boils at a temperature of",
    "The quick brown fox",
    "In the year 1969, astronauts",
]


def sample_text() -> str:
    """The public-domain prose sample shipped in `llmhost/optimize/data/`."""
    return resources.files("llmhost.optimize").joinpath("data", SAMPLE_NAME).read_text(encoding="utf-8")


def eval_config(window: int, threads: int = 0, batch: int = 64) -> EngineConfig:
    """One sequence, no prefix cache; small batches since every token's logits are kept."""
    return EngineConfig(
        max_concurrent=1,
        max_input_tokens=window - 1,
        max_total_tokens=window,
        max_batch_tokens=batch,
        prefix_cache_seqs=0,
        n_threads=threads,
    )


def _log_softmax_at(logits: npt.NDArray[np.float32], targets: list[int]) -> npt.NDArray[np.float64]:
    """Each row's log-softmax at its target, normalised as the engine's prompt logprobs are. A window's
    rows are window x vocabulary floats (255 x 262,144 for Gemma 3: 268 MB); a float64 copy of them, as
    this once made, took 5.1 CPU-s a window where this takes 0.14, for the same figures to 1.2e-8 nats
    (measured on random rows of that shape)."""
    out: npt.NDArray[np.float64] = logits[np.arange(len(targets)), targets] - row_log_z(logits)
    return out


class PerplexityJSON(TypedDict):
    perplexity: float
    mean_nll: float
    tokens_scored: int
    windows: int
    window: int
    text: str


class AgreementJSON(TypedDict):
    agreement: float
    tokens: int
    prompts: int
    identical_prefix: list[int]


class QualityReport(TypedDict):
    """quality.json: the model's perplexity on the sample text, and against a base model (the one it
    was quantized from) the base's perplexity and how often both pick the same greedy token."""

    model: str
    model_description: str
    perplexity: PerplexityJSON
    greedy_agreement: AgreementJSON | None
    llmhost_version: str
    base: NotRequired[str]
    base_perplexity: NotRequired[PerplexityJSON]


@dataclass(slots=True)
class Perplexity:
    perplexity: float
    mean_nll: float
    tokens_scored: int
    windows: int
    window: int
    text: str = SAMPLE_NAME

    def to_json(self) -> PerplexityJSON:
        return {
            "perplexity": self.perplexity,
            "mean_nll": self.mean_nll,
            "tokens_scored": self.tokens_scored,
            "windows": self.windows,
            "window": self.window,
            "text": self.text,
        }


def perplexity(
    model: LlamaModel, text: str | None = None, window: int = 256, max_tokens: int = 0
) -> Perplexity:
    """exp(mean negative log-likelihood) over non-overlapping windows of `window` tokens.

    Each window starts a fresh sequence with BOS; every next-token prediction inside it is scored.
    `max_tokens` > 0 scores only the first tokens of the text (quick checks).
    """
    tokens = model.tokenize(text if text is not None else sample_text(), add_special=False)
    if max_tokens > 0:
        tokens = tokens[:max_tokens]
    bos = model.tokenize("", add_special=True)
    body = window - len(bos)
    total_nll = 0.0
    scored = 0
    windows = 0
    for start in range(0, len(tokens), body):
        chunk = bos + tokens[start : start + body]
        if len(chunk) < 2:
            break
        model.apply(KvTrim(0, 0))
        rows = np.concatenate(list(model.iter_logits(chunk[:-1], seq_id=0)))
        nll = -_log_softmax_at(rows, chunk[1:])
        total_nll += float(nll.sum())
        scored += len(nll)
        windows += 1
    model.apply(KvTrim(0, 0))
    if scored == 0:
        raise ValueError("the text is too short to score")
    mean = total_nll / scored
    return Perplexity(math.exp(mean), mean, scored, windows, window)


def greedy(model: LlamaModel, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens after `prompt` (stops early at end of generation)."""
    model.apply(KvTrim(0, 0))
    out: list[int] = []
    idx = model.decode([(prompt, 0, 0, 1)])[0]
    pos = len(prompt)
    for _ in range(n):
        tok = int(np.argmax(model.logits(idx)))
        out.append(tok)
        if model.is_eog(tok):
            break
        idx = model.decode([([tok], pos, 0, 1)])[0]
        pos += 1
    model.apply(KvTrim(0, 0))
    return out


@dataclass(slots=True)
class Agreement:
    agreement: float  # fraction of the base's greedy tokens the model also ranks first
    tokens: int
    prompts: int
    identical_prefix: list[int] = field(default_factory=list)  # per prompt: tokens until first difference

    def to_json(self) -> AgreementJSON:
        return {
            "agreement": self.agreement,
            "tokens": self.tokens,
            "prompts": self.prompts,
            "identical_prefix": list(self.identical_prefix),
        }


def greedy_agreement(
    model: LlamaModel, base: LlamaModel, prompts: list[str], n_tokens: int = 16
) -> Agreement:
    """Teacher-forced top-1 agreement on the base model's greedy continuations.

    The model reads prompt + the base's continuation; each position counts when its argmax is the
    base's token, so one early difference does not make every later comparison meaningless.
    """
    if model.n_vocab != base.n_vocab:
        raise ValueError(f"vocabularies differ: {model.n_vocab} vs {base.n_vocab} tokens")
    same = total = 0
    prefixes: list[int] = []
    for text in prompts:
        prompt = base.tokenize(text)
        if model.tokenize(text) != prompt:
            raise ValueError(f"the two models tokenize {text!r} differently")
        cont = greedy(base, prompt, n_tokens)
        seq = prompt + cont
        model.apply(KvTrim(0, 0))
        rows = np.concatenate(list(model.iter_logits(seq[:-1], seq_id=0)))[len(prompt) - 1 :]
        model.apply(KvTrim(0, 0))
        hits = [int(np.argmax(r)) == t for r, t in zip(rows, cont, strict=True)]
        same += sum(hits)
        total += len(hits)
        prefixes.append(hits.index(False) if False in hits else len(hits))
    return Agreement(same / total if total else 1.0, total, len(prompts), prefixes)


def evaluate(
    model_path: str | Path,
    base_path: str | Path | None = None,
    window: int = 256,
    max_tokens: int = 0,
    n_tokens: int = 16,
    prompts: list[str] | None = None,
    threads: int = 0,
) -> QualityReport:
    """The content of quality.json."""
    config = eval_config(window, threads)
    model = LlamaModel(model_path, config)
    try:
        result: QualityReport = {
            "model": str(model_path),
            "model_description": model.info.description,
            "perplexity": perplexity(model, window=window, max_tokens=max_tokens).to_json(),
            "greedy_agreement": None,
            "llmhost_version": __version__,
        }
        if base_path is not None:
            base = LlamaModel(base_path, config)
            try:
                base_ppl = perplexity(base, window=window, max_tokens=max_tokens)
                agree = greedy_agreement(model, base, prompts or PROMPTS, n_tokens)
            finally:
                base.close()
            result["base"] = str(base_path)
            result["base_perplexity"] = base_ppl.to_json()
            result["greedy_agreement"] = agree.to_json()
    finally:
        model.close()
    return result


def write_quality(result: QualityReport, out: str | Path) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
