"""Log-likelihoods of lm-eval's (context, continuation) pairs computed directly by llama-cpp-python on the
default GGUF, the way each lm-eval backend asks llmhost for them: the reference the server is held to.

The settings are `llmhost serve`'s as the tests run it: flash attention as the server has it, full
sliding-window KV, one thread, and the prompt evaluated in the pieces the server computes a scored prompt
in (`EngineConfig.prompt_logits_rows` positions a step: llama.cpp's figures depend on them)."""

from __future__ import annotations

import numpy as np
from llama_cpp import Llama

from llmhost.engine.config import EngineConfig
from llmhost.engine.llamacpp.gguf_check import check_file
from llmhost.store.resolve import default_model_path


class Reference:
    def __init__(self, flash_attn: bool, n_ctx: int = 64) -> None:
        path = default_model_path()
        n_vocab = check_file(path).metadata["tokenizer.ggml.tokens"]
        assert isinstance(n_vocab, int)
        pieces = EngineConfig().prompt_logits_rows(n_vocab)
        self.llm = Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_batch=pieces,
            n_ubatch=pieces,
            n_threads=1,
            n_threads_batch=1,
            flash_attn=flash_attn,
            swa_full=True,
            logits_all=True,
            verbose=False,
        )
        self.n_ctx = n_ctx

    def tokenize(self, text: str, bos: bool) -> list[int]:
        return list(self.llm.tokenize(text.encode(), add_bos=bos, special=True))

    def logprobs(self, tokens: list[int], first: int = 1) -> list[float]:
        """logprobs[i]: token i given the tokens before it, for i >= first (nan before it). The whole
        sequence is evaluated (logits at every position, as the server computes them: how many rows
        llama.cpp's output layer computes changes its figures by up to 7e-4 nats); only the rows a figure
        needs are normalised (over the 262k-token vocabulary)."""
        assert 1 <= first < len(tokens) <= self.n_ctx
        self.llm.reset()
        self.llm.eval(tokens)
        rows = np.asarray(self.llm.scores[first - 1 : len(tokens) - 1], dtype=np.float64)
        m = rows.max(axis=1, keepdims=True)
        log_z = (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True))).ravel()
        picked = rows[np.arange(len(rows)), tokens[first:]] - log_z
        return [float("nan")] * first + picked.tolist()

    def gguf_and_bos(self, context: str, continuation: str) -> tuple[float, float]:
        """From one evaluation of the text with BOS first (as the server tokenizes a text prompt):

        - lm-eval's `gguf` backend's figure: the text is sent, the continuation is the tokens whose
          text starts at or after the context's last character;
        - the model's true log-likelihood, the continuation being what follows the context's own
          tokens (as llama.cpp and transformers split it).
        The two differ only where a token straddles the context's end."""
        tokens = self.tokenize(context + continuation, bos=True)
        n_context = len(self.tokenize(context, bos=True))
        for i in range(len(tokens)):
            start = len(self.llm.detokenize(tokens[:i]).decode("utf-8", "ignore"))
            if start >= len(context):
                lps = self.logprobs(tokens, first=min(i, n_context))
                return sum(lps[i:]), sum(lps[n_context:])
        raise AssertionError(f"no token of {continuation!r} starts after the context")

    def remote(self, context: str, continuation: str) -> float:
        """lm-eval's `local-completions` with the remote tokenizer: token ids without BOS, the
        continuation being what follows the context's own tokens."""
        whole = self.tokenize(context + continuation, bos=False)
        n_context = len(self.tokenize(context, bos=False))
        return sum(self.logprobs(whole, first=n_context)[n_context:])
