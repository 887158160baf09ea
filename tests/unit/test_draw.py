"""The numpy sampler chain against llama.cpp's own samplers, run on the same candidate arrays."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import llama_cpp as lc
import numpy as np
import pytest

from llmhost.engine.request import SamplingParams
from llmhost.engine.sample import draw
from llmhost.engine.sample.draw import BLOCK, Chain, Penalties
from llmhost.engine.sample.sampling import Sampler

VOCAB = 5000


def llama_cpp_apply(logits: np.ndarray, *samplers: Any) -> dict[int, float]:
    """What llama.cpp's samplers leave of `logits`: {token: logit} (a sampler that sets a logit to -inf
    rather than dropping it leaves it out too)."""
    n = len(logits)
    data = (lc.llama_token_data * n)()
    for i, x in enumerate(logits):
        data[i] = lc.llama_token_data(i, float(x), 0.0)
    arr = lc.llama_token_data_array(data, n, -1, False)
    for smpl in samplers:
        lc.llama_sampler_apply(smpl, ctypes.byref(arr))
        lc.llama_sampler_free(smpl)
    return {arr.data[i].id: arr.data[i].logit for i in range(arr.size) if arr.data[i].logit != float("-inf")}


def rows() -> list[np.ndarray]:
    """Flat, peaked and tied rows: Gemma-like spread (std ~5), a sharp one, one with ties."""
    rng = np.random.default_rng(3)
    flat = (rng.standard_normal(VOCAB) * 5).astype(np.float32)
    sharp = (rng.standard_normal(VOCAB) * 2).astype(np.float32)
    sharp[:5] += np.float32(12.0)
    tied = np.repeat(np.arange(VOCAB // 10, dtype=np.float32), 10)[:VOCAB] / 50
    return [flat, sharp, tied]


def kept(ids: np.ndarray | None, n: int) -> set[int]:
    return set(range(n)) if ids is None else {int(i) for i in ids}


@pytest.mark.parametrize("which", ["flat", "sharp", "tied"])
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda r: draw.top_k(None, r, 40), lambda: lc.llama_sampler_init_top_k(40)),
        (lambda r: draw.top_k(None, r, 1), lambda: lc.llama_sampler_init_top_k(1)),
        (lambda r: draw.top_p(None, r, 0.9), lambda: lc.llama_sampler_init_top_p(0.9, 1)),
        (lambda r: draw.top_p(None, r, 0.5), lambda: lc.llama_sampler_init_top_p(0.5, 1)),
        (lambda r: draw.min_p(None, r, 0.05), lambda: lc.llama_sampler_init_min_p(0.05, 1)),
        (lambda r: draw.typical(None, r, 0.8), lambda: lc.llama_sampler_init_typical(0.8, 1)),
    ],
    ids=["top_k40", "top_k1", "top_p0.9", "top_p0.5", "min_p0.05", "typical0.8"],
)
def test_each_sampler_keeps_what_llama_cpp_keeps(
    which: str, ours: Callable[[np.ndarray], Any], theirs: Callable[[], Any]
) -> None:
    row = dict(zip(["flat", "sharp", "tied"], rows(), strict=True))[which]
    ids, logits = ours(row)
    got = kept(ids, len(row))
    expected = llama_cpp_apply(row, theirs())
    assert np.array_equal(np.sort(logits), np.sort(row[sorted(got)]))
    if which == "tied":
        # at a boundary between equal logits llama.cpp's partial sort may keep another of them
        assert sorted(row[sorted(got)]) == sorted(expected.values())
    else:
        assert got == set(expected)


def test_the_chain_applies_in_llama_cpps_order() -> None:
    """top-k, then top-p over what top-k left (renormalized), then min-p: llama.cpp's chain's set."""
    row = rows()[0]
    ids, logits = draw.top_k(None, row, 200)
    ids, logits = draw.top_p(ids, logits, 0.8)
    ids, logits = draw.min_p(ids, logits, 0.02)
    chain = (
        lc.llama_sampler_init_top_k(200),
        lc.llama_sampler_init_top_p(0.8, 1),
        lc.llama_sampler_init_min_p(0.02, 1),
    )
    expected = llama_cpp_apply(row, *chain)
    assert kept(ids, len(row)) == set(expected)


def test_top_p_looks_past_its_first_band_when_the_best_tokens_hold_too_little() -> None:
    """One token 6 logits above the rest holds 7.5% of the mass: the first band (4 below it) holds only
    it, so top-p 0.5 widens to the next one and keeps about 2,000 more."""
    row = np.concatenate([[6.0], np.linspace(0.0, -1.0, VOCAB - 1)]).astype(np.float32)
    ids, _ = draw.top_p(None, row, 0.5)
    got = kept(ids, VOCAB)
    assert got == set(llama_cpp_apply(row, lc.llama_sampler_init_top_p(0.5, 1)))
    assert 1_000 < len(got) < 4_000


def reference_draw(logits: np.ndarray, temperature: float, u: float) -> int:
    w = np.exp((logits.astype(np.float64) - logits.max()) / temperature)
    cum = np.cumsum(w)
    return int(np.searchsorted(cum, u * cum[-1], side="right"))


@pytest.mark.parametrize("n", [7, 2 * BLOCK + 5, 262_144])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_draw_picks_the_token_whose_cumulative_share_holds_u(n: int, temperature: float) -> None:
    """Over the whole row (the block path for long rows): the token of the exact inverse CDF, except
    where u falls within float32 rounding of a boundary (none of these deterministic u do)."""
    rng = np.random.default_rng(n)
    logits = (rng.standard_normal(n) * 4).astype(np.float32)
    us = np.linspace(0.0005, 0.9995, 400)
    got = [draw.draw(logits, temperature, float(u)) for u in us]
    want = [reference_draw(logits, temperature, float(u)) for u in us]
    agree = sum(g == w for g, w in zip(got, want, strict=True))
    assert agree >= len(us) - 1, f"{len(us) - agree} draws differ"


def test_draw_frequencies_follow_the_softmax() -> None:
    logits = np.array([2.0, 1.0, 0.0, -1.0, -30.0], dtype=np.float32)
    probs = np.exp(logits / 0.8 - np.max(logits / 0.8))
    probs /= probs.sum()
    us = (np.arange(10_000) + 0.5) / 10_000
    counts = np.bincount([draw.draw(logits, 0.8, float(u)) for u in us], minlength=5)
    assert np.allclose(counts / 10_000, probs, atol=2e-4)


def test_penalties_match_llama_cpps_penalties_sampler() -> None:
    row = rows()[0]
    history = [42, 3000, 5, 9, 5, 100, 7, 5, 9]
    pen = Penalties(last_n=6, repeat=1.3, frequency=0.4, presence=0.25)
    smpl = lc.llama_sampler_init_penalties(VOCAB, 6, 1.3, 0.4, 0.25)
    for tok in history:
        pen.accept(tok)
        lc.llama_sampler_accept(smpl, tok)
    ours = row.copy()
    pen.apply(ours)
    theirs = llama_cpp_apply(row, smpl)
    assert np.allclose(ours, [theirs[i] for i in range(VOCAB)], rtol=0, atol=1e-5)
    assert ours[5] != row[5] and ours[42] == row[42]  # 42 left the window of the last 6


def test_sample_with_a_seeded_u_is_reproducible_and_follows_the_truncation() -> None:
    row = rows()[1]
    chain = Chain(temperature=1.0, top_k=3)
    top3 = set(np.argsort(-row)[:3].tolist())
    picks = {draw.sample(row, chain, float(u)) for u in np.linspace(0, 0.999, 200)}
    assert picks <= top3
    assert draw.sample(row, chain, 0.37) == draw.sample(row, chain, 0.37)


class Rows:
    """The part of LlamaModel a Sampler reads: a logits row per batch index and the end tokens."""

    def __init__(self, row: np.ndarray) -> None:
        self.row = row
        self.eog_tokens = [0]

    def logits(self, batch_index: int) -> np.ndarray:
        return self.row


def sampler(row: np.ndarray, **params: Any) -> Sampler:
    return Sampler(Rows(row), SamplingParams(**params), prompt=[7, 7, 8])  # type: ignore[arg-type]


def test_a_seeded_sampler_repeats_its_draws_and_another_seed_does_not() -> None:
    row = rows()[0]

    def draws(seed: int) -> list[int]:
        s = sampler(row, temperature=1.0, seed=seed)
        return [s.sample(0)[0] for _ in range(20)]

    assert draws(11) == draws(11)
    assert draws(11) != draws(12)


def test_ignore_eos_never_draws_the_end_token_even_when_it_dominates() -> None:
    row = rows()[0].copy()
    row[0] = row.max() + 5  # the end token holds most of the mass
    s = sampler(row, temperature=1.0, seed=1, ignore_eos=True)
    assert all(s.sample(0)[0] != 0 for _ in range(200))
    assert row[0] == row.max()  # the context's own row is left as the model computed it


def test_penalties_look_back_over_the_prompt_and_the_tokens_sampled() -> None:
    row = np.zeros(16, dtype=np.float32)
    row[7], row[8], row[9] = 3.0, 2.9, 2.8
    s = sampler(row, temperature=0.0, presence_penalty=0.5, penalty_last_n=8)
    # 7 and 8 are in the prompt: 9 wins; then 9 is penalized too and 7 (3.0 - 0.5) leads again
    assert [s.sample(0)[0] for _ in range(2)] == [9, 7]


def test_greedy_with_ignore_eos_takes_the_best_other_token_when_the_end_token_is_best() -> None:
    row = rows()[0].copy()
    second = int(np.argmax(row))
    row[0] = row.max() + 1
    s = sampler(row, temperature=0.0, ignore_eos=True)
    assert s.sample(0)[0] == second
    row[0] = row.min() - 1
    assert s.sample(0)[0] == second


@pytest.mark.parametrize("temperature", [2.2250738585e-313, 1e-40, 1e-30])
def test_a_vanishing_temperature_draws_the_best_token(temperature: float) -> None:
    """0 as a float32 (llama.cpp's reading) is greedy; above that the division keeps the best at 1."""
    row = rows()[0]
    s = sampler(row, temperature=temperature, seed=3)
    assert [s.sample(0)[0] for _ in range(5)] == [int(np.argmax(row))] * 5


def test_a_row_with_nothing_to_draw_from_gives_a_token_not_an_index_past_the_end() -> None:
    row = np.full(3 * BLOCK, -np.inf, dtype=np.float32)
    assert 0 <= draw.draw(row, 1.0, 0.5) < len(row)


@pytest.mark.parametrize("k", [1, 2, 5, 20, 300])
def test_best_is_the_k_highest_highest_first(k: int) -> None:
    """Against a full sort: random rows (a vocabulary's spread, and one so flat or so steep that the best
    k lie past every band), equal logits (by index), float32 and float64 rows."""
    rng = np.random.default_rng(k)
    rows = [
        (rng.standard_normal(50_000) * 3).astype(np.float32),
        (rng.standard_normal(50_000) * 100).astype(np.float32),  # steep: few tokens in any band
        np.round(rng.standard_normal(50_000), 1).astype(np.float32),  # many equal logits
        rng.standard_normal(5_000).astype(np.float64),
    ]
    for row in rows:
        want = np.lexsort((np.arange(len(row)), -row))[:k]
        assert draw.best(row, k).tolist() == want.tolist()
