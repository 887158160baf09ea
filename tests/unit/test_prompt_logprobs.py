"""Prompt logprobs for a block of rows equal the one-row computation."""

from __future__ import annotations

import numpy as np

from llmhost.engine.sample.sampling import prompt_logprobs, token_logprob


def test_block_equals_row_by_row() -> None:
    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((6, 5000)) * 4).astype(np.float32)
    tokens = [3, 4999, 0, 17, 250]  # one fewer than rows: the chunk's last position predicts no prompt token
    block = prompt_logprobs(rows, tokens, top_n=3)
    for i, (lp, token) in enumerate(zip(block, tokens, strict=True)):
        one = token_logprob(rows[i], token, 3)
        assert lp.token == token and abs(lp.logprob - one.logprob) < 1e-4
        assert [t for t, _ in lp.top] == [t for t, _ in one.top]
        assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(lp.top, one.top, strict=True))
    assert all(lp.top == () for lp in prompt_logprobs(rows, tokens, top_n=0))
