"""Per-sequence sampling with llama.cpp's sampler chains, plus optional logprobs."""

from __future__ import annotations

import random
from typing import Any

import llama_cpp as lc
import numpy as np
import numpy.typing as npt

from llmhost.engine.constraint import TokenMatcher
from llmhost.engine.llama import LlamaModel
from llmhost.engine.request import SamplingParams, TokenLogprob


def plain_greedy(params: SamplingParams) -> bool:
    """Greedy with no penalties: the next token is the argmax of the logits, whatever came before."""
    penalized = (
        params.repetition_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0
    )
    return params.greedy and not penalized and params.constraint is None


class Sampler:
    """One llama.cpp sampler chain for one sequence, in llama.cpp's usual order:
    logit bias, penalties, top-k, typical-p, top-p, min-p, temperature, then a seeded draw (or greedy).
    A grammar (`matcher`) first masks the tokens it does not allow, in the context's logits row.
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
        self._model = model
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        self._chain: Any = chain
        bias = dict(params.logit_bias)
        if params.ignore_eos:
            for tok in model.eog_tokens:
                bias[tok] = float("-inf")
        penalized = (
            params.repetition_penalty != 1.0
            or params.frequency_penalty != 0.0
            or params.presence_penalty != 0.0
        )
        # plain greedy is an argmax over the logits: llama.cpp's chain would first build a candidate
        # array of the whole vocabulary (262k entries for Gemma) for every token
        self._argmax = params.greedy and not penalized
        self._bias_ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        self._bias_values = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
        if bias:
            arr = (lc.llama_logit_bias * len(bias))()
            for i, (tok, value) in enumerate(bias.items()):
                arr[i] = lc.llama_logit_bias(tok, value)
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(model.n_vocab, len(bias), arr))
        if penalized:
            lc.llama_sampler_chain_add(
                chain,
                lc.llama_sampler_init_penalties(
                    model.n_vocab,
                    params.penalty_last_n,
                    params.repetition_penalty,
                    params.frequency_penalty,
                    params.presence_penalty,
                ),
            )
        if params.greedy:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(params.top_k))
            if params.typical_p < 1.0:
                lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_typical(params.typical_p, 1))
            if params.top_p < 1.0:
                lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0.0:
                lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_min_p(params.min_p, 1))
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(params.temperature))
            seed = params.seed if params.seed is not None else random.getrandbits(32)
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        # penalties look back over the prompt too, as llama-server does
        for tok in prompt[-params.penalty_last_n :] if params.penalty_last_n > 0 else []:
            lc.llama_sampler_accept(chain, tok)

    def sample(self, batch_index: int) -> tuple[int, TokenLogprob | None]:
        if self.matcher is not None:
            self.matcher.mask(self._model.logits(batch_index))
        token = self._choose(batch_index)
        if self.matcher is not None:
            self.matcher.accept(token)
        if self.params.logprobs is None:
            return token, None
        return token, self._logprob(batch_index, token, self.params.logprobs)

    @property
    def done(self) -> bool:
        """The grammar is complete: nothing may follow the last token."""
        return self.matcher is not None and self.matcher.done

    def _choose(self, batch_index: int) -> int:
        if self._argmax:
            logits = self._model.logits(batch_index)
            if len(self._bias_ids):
                logits = logits.copy()
                logits[self._bias_ids] += self._bias_values
            return int(np.argmax(logits))
        return int(lc.llama_sampler_sample(self._chain, self._model.ctx, batch_index))

    def _logprob(self, batch_index: int, token: int, top_n: int) -> TokenLogprob:
        return token_logprob(self._model.logits(batch_index), token, top_n)

    def close(self) -> None:
        if self._chain is not None:
            lc.llama_sampler_free(self._chain)
            self._chain = None


def token_logprob(row: npt.NDArray[np.float32], token: int, top_n: int) -> TokenLogprob:
    """log-softmax of one logits row at `token`, and the `top_n` best alternatives."""
    logits = row.astype(np.float64)
    m = float(logits.max())
    log_z = m + float(np.log(np.exp(logits - m).sum()))
    top: tuple[tuple[int, float], ...] = ()
    if top_n > 0:
        idx = np.argpartition(-logits, top_n)[:top_n]
        idx = idx[np.argsort(-logits[idx])]
        top = tuple((int(i), float(logits[i] - log_z)) for i in idx)
    return TokenLogprob(token=token, logprob=float(logits[token] - log_z), top=top)


def prompt_logprobs(rows: npt.NDArray[np.float32], tokens: list[int], top_n: int) -> list[TokenLogprob]:
    """Row i's log-softmax at tokens[i] (and its `top_n` best), for a block of rows at once: a prompt
    chunk's worth in one pass instead of one float64 pass per position."""
    rows = rows[: len(tokens)]
    m = rows.max(axis=1, keepdims=True)
    log_z = (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True, dtype=np.float64))).ravel()
    picked = rows[np.arange(len(tokens)), tokens] - log_z
    tops: list[tuple[tuple[int, float], ...]] = [()] * len(tokens)
    if top_n > 0:
        idx = np.argpartition(-rows, top_n, axis=1)[:, :top_n]
        for i, row_idx in enumerate(idx):
            best = row_idx[np.argsort(-rows[i, row_idx])]
            tops[i] = tuple((int(t), float(rows[i, t] - log_z[i])) for t in best)
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
