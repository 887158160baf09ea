"""Per-sequence sampling (llama.cpp's sampler chain, run by `draw`), plus optional logprobs."""

from __future__ import annotations

import random

import numpy as np
import numpy.typing as npt

from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.engine.request import SamplingParams, TokenLogprob
from llmhost.engine.sample.constraint import TokenMatcher
from llmhost.engine.sample.draw import Chain, Penalties, best, sample
from llmhost.engine.sample.thinking import ThoughtTracker


class Sampler:
    """The next token of one sequence, in llama.cpp's usual order: logit bias, penalties, top-k,
    typical-p, top-p, min-p, temperature, then a seeded draw (or the argmax when greedy); see `draw`
    for why the chain runs here rather than in llama.cpp. A grammar (`matcher`) first masks the tokens
    it does not allow, in the context's logits row; a thinking model's thought (`thought`) is free text,
    and its end tag is forced once its budget is spent.
    """

    def __init__(
        self,
        model: LlamaModel,
        params: SamplingParams,
        prompt: list[int],
        matcher: TokenMatcher | None = None,
    ) -> None:
        self.params = params
        self.matcher = matcher
        thinking = params.thinking
        self.thought = None if thinking is None else ThoughtTracker(thinking, matcher is not None)
        self._model = model
        bias = dict(params.logit_bias)
        if params.ignore_eos:
            for tok in model.eog_tokens:
                bias[tok] = float("-inf")
        self._bias_ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        self._bias_values = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
        self._penalties: Penalties | None = None
        if params.penalized:
            self._penalties = Penalties(
                params.penalty_last_n,
                params.repetition_penalty,
                params.frequency_penalty,
                params.presence_penalty,
            )
            # penalties look back over the prompt too, as llama-server does
            for tok in prompt[-params.penalty_last_n :] if params.penalty_last_n > 0 else []:
                self._penalties.accept(tok)
        # only tokens ruled out (ignore_eos): a greedy pick needs a biased copy of the row (1 MiB for
        # Gemma) only when it is one of them
        self._banned = {tok for tok, value in bias.items() if value == float("-inf")}
        self._argmax_first = params.greedy and self._penalties is None and len(self._banned) == len(bias)
        self._chain = Chain(params.temperature, params.top_k, params.typical_p, params.top_p, params.min_p)
        seed = params.seed if params.seed is not None else random.getrandbits(32)
        self._rng = np.random.default_rng(seed & 0xFFFFFFFF)

    def sample(self, batch_index: int) -> tuple[int, TokenLogprob | None]:
        token = self.thought.forced() if self.thought is not None else None
        if token is None:
            self._mask(batch_index)
            token = self._choose(batch_index)
        answer = self.thought is None or self.thought.accept(token)
        if self.matcher is not None and answer:
            self.matcher.accept(token)
        if self._penalties is not None:
            self._penalties.accept(token)
        if self.params.logprobs is None:
            return token, None
        return token, self._logprob(batch_index, token, self.params.logprobs)

    def _mask(self, batch_index: int) -> None:
        """The grammar's mask over the answer; before it, the thought's start tag stays allowed too."""
        if self.matcher is None:
            return
        thought = self.thought
        if thought is not None and not thought.answering and thought.may_open is None:
            return  # inside the thought: free text
        row = self._model.logits(batch_index)
        opening = thought.may_open if thought is not None else None
        kept = float(row[opening]) if opening is not None else 0.0
        self.matcher.mask(row)
        if opening is not None:
            row[opening] = kept

    @property
    def reasoning_tokens(self) -> int:
        return self.thought.reasoning_tokens if self.thought is not None else 0

    @property
    def done(self) -> bool:
        """The grammar is complete: nothing may follow the last token."""
        return self.matcher is not None and self.matcher.done

    def _choose(self, batch_index: int) -> int:
        logits = self._model.logits(batch_index)
        if self._argmax_first:
            token = int(np.argmax(logits))
            if token not in self._banned:
                return token
        if len(self._bias_ids) or self._penalties is not None:
            logits = logits.copy()  # the context's row stays the model's own (logprobs read it)
            logits[self._bias_ids] += self._bias_values
            if self._penalties is not None:
                self._penalties.apply(logits)
        if self.params.greedy:
            return int(np.argmax(logits))
        return sample(logits, self._chain, float(self._rng.random()))

    def _logprob(self, batch_index: int, token: int, top_n: int) -> TokenLogprob:
        return token_logprob(self._model.logits(batch_index), token, top_n)

    def close(self) -> None:
        """Nothing to free: kept so a sampler's end stays explicit where requests finish."""


def token_logprob(row: npt.NDArray[np.float32], token: int, top_n: int) -> TokenLogprob:
    """log-softmax of one logits row at `token`, and the `top_n` best alternatives."""
    logits = row.astype(np.float64)
    m = float(logits.max())
    log_z = m + float(np.log(np.exp(logits - m).sum()))
    top: tuple[tuple[int, float], ...] = ()
    if top_n > 0:
        top = tuple((int(i), float(logits[i] - log_z)) for i in best(logits, top_n))
    return TokenLogprob(token=token, logprob=float(logits[token] - log_z), top=top)


def row_log_z(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Each row's log-sum-exp, for a block of rows at once: exp in float32, its sum in float64 (a float64
    copy of the block would double its memory and cost ~35x the time at a 262k-token vocabulary)."""
    m = rows.max(axis=1, keepdims=True)
    log_z: npt.NDArray[np.float64] = (
        m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True, dtype=np.float64))
    ).ravel()
    return log_z


def prompt_logprobs(rows: npt.NDArray[np.float32], tokens: list[int], top_n: int) -> list[TokenLogprob]:
    """Row i's log-softmax at tokens[i] (and its `top_n` best), for a block of rows at once: a prompt
    chunk's worth in one pass instead of one float64 pass per position."""
    rows = rows[: len(tokens)]
    log_z = row_log_z(rows)
    picked = rows[np.arange(len(tokens)), tokens] - log_z
    tops: list[tuple[tuple[int, float], ...]] = [()] * len(tokens)
    if top_n > 0:
        for i, row in enumerate(rows):
            tops[i] = tuple((int(t), float(row[t] - log_z[i])) for t in best(row, top_n))
    return [TokenLogprob(int(t), float(v), top) for t, v, top in zip(tokens, picked, tops, strict=True)]


def verify_draft(sampler: Sampler, idx: int, draft: tuple[int, ...]) -> list[tuple[int, TokenLogprob | None]]:
    """The model's own tokens at each drafted position (logits rows from `idx`), up to and including the
    first that differs from the draft (all accepted: one more, from the last position)."""
    out = []
    for j in range(len(draft) + 1):
        token, logprob = sampler.sample(idx + j)
        out.append((token, logprob))
        if j == len(draft) or token != draft[j]:
            break
    return out
