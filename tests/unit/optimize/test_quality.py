"""The perplexity's per-token log-likelihoods: computed in float32 with float64 sums, they are the float64
figures (to 1e-6 nats) over a vocabulary as wide as Gemma 3's."""

from __future__ import annotations

import numpy as np

from llmhost.optimize.quality import _log_softmax_at


def test_log_softmax_at_the_targets_is_the_float64_figure() -> None:
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((6, 262_144)) * 4).astype(np.float32)
    logits[0, 7] = 60.0  # one token far above the rest
    logits[1] = -30.0  # a flat row
    targets = [7, 5, 262_143, 0, 100, 9]
    x = logits.astype(np.float64)
    want = (
        x[np.arange(6), targets]
        - np.log(np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1))
        - x.max(axis=1)
    )
    got = _log_softmax_at(logits, targets)
    assert got.dtype == np.float64 and np.abs(got - want).max() < 1e-6
