"""EleutherAI's lm-eval against a real `llmhost serve`: a local multiple-choice task (tests/fixtures/lmeval)
through lm-eval's `gguf` backend and through `local-completions` with the remote tokenizer, each run as
the command of docs/guides/lm-eval.md. Every choice's log-likelihood must equal llama-cpp-python's on the
same GGUF with the same settings (flash attention on, as `llmhost serve` runs by default) for what each
backend sends, and the chosen answers must be the same.

What each backend sends is not the same: lm-eval's remote tokenizer asks `/tokenize` for ids without
special tokens whatever `add_bos_token` says (lm-eval 0.4.13's RemoteTokenizer.encode), so a model that
expects BOS (the default Gemma) is scored without it. Against the model's true log-likelihoods (BOS
first), the `gguf` backend is exact and the remote tokenizer's answers differ: measured on this task,
7 of 24 answers, accuracy 0.667 against a true 0.958. The tests show that difference, they do not hide it.

Tolerance, measured on the default model (Gemma 3 270M Q4_K_M, one thread): a prompt evaluated alone
agrees with llama-cpp-python to 3.2e-8 nats per choice (160 choices, flash attention on both sides,
whatever other prompts the server's KV cache holds). Both backends here send one prompt at a time, each
to a server of its own, so every prompt is evaluated alone. Batched with other prompts (lm-eval's
batch_size / num_concurrent), llama.cpp itself moves a token's logprob by up to 2.0 nats on this model
(flash attention on; docs/guides/scoring.md has the figures), enough to change an answer: not compared here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.lmeval_reference import Reference

ROOT = Path(__file__).parents[2]
TASKS = ROOT / "tests" / "fixtures" / "lmeval"
TOLERANCE = 1e-5  # nats per choice: 300x the largest difference measured (3.2e-8)
LM_EVAL = Path(sys.executable).parent / "lm_eval"
GGUF_DOCS = 8  # the gguf backend scores the first 8 documents (--limit; the first 4 have multi-byte text)


def docs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TASKS / "llmhost_mc.jsonl").read_text().splitlines()]


def pairs(n_docs: int | None = None) -> list[tuple[str, str]]:
    """The (context, continuation) pairs the task's YAML makes: lm-eval's arguments, checked below."""
    return [(f"Question: {d['question']}\nAnswer:", f" {c}") for d in docs()[:n_docs] for c in d["choices"]]


def lm_eval(model: str, model_args: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    """The command of docs/guides/lm-eval.md, run from the repository root (the task's data path is
    relative to it)."""
    cmd = [
        str(LM_EVAL),
        "--model",
        model,
        "--model_args",
        model_args,
        "--tasks",
        "llmhost_mc",
        "--include_path",
        "tests/fixtures/lmeval",
        "--output_path",
        str(out),
        "--log_samples",
        *extra,
    ]
    # nothing from a hub: the task's data is local, datasets' cache is the test's own
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(out / "hf")}
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def samples(run: subprocess.Popen[str], out: Path) -> list[dict[str, Any]]:
    """The samples a finished run logged."""
    output, _ = run.communicate(timeout=280)
    assert run.returncode == 0, output[-4000:]
    (path,) = out.glob("*/samples_llmhost_mc_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def check(samples: list[dict[str, Any]], want: list[float]) -> float:
    """Every choice's log-likelihood within TOLERANCE of `want` and the same answer chosen; the accuracy."""
    samples = sorted(samples, key=lambda s: s["doc_id"])
    got, args = [], []
    for s in samples:
        got += [float(r[0]) for r in s["filtered_resps"]]
        args += [(a["arg_0"], a["arg_1"]) for a in s["arguments"].values()]
    assert args == pairs(len(samples)) and len(got) == len(want)
    worst = max(abs(g - w) for g, w in zip(got, want, strict=True))
    assert worst < TOLERANCE, f"largest difference {worst:.3g} nats"
    for i, s in enumerate(samples):
        mine, ref = got[4 * i : 4 * i + 4], want[4 * i : 4 * i + 4]
        assert mine.index(max(mine)) == ref.index(max(ref)), s["doc"]
        assert s["acc"] == float(ref.index(max(ref)) == s["doc"]["answer"])
    return sum(s["acc"] for s in samples) / len(samples)


@pytest.fixture(scope="module")
def second_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A second server like `server`: each backend's prompts go one at a time to a server of their own,
    both runs at once."""
    srv = start_server(
        tmp_path_factory.mktemp("lmeval"),
        "--max-concurrent",
        "2",
        "--max-input-tokens",
        "256",
        "--max-total-tokens",
        "512",
        "--served-model-name",
        "gemma-test",
    )
    yield srv
    stop_server(srv)


# two lm-eval runs and 192 llama-cpp-python evaluations (the true, BOS-first figures of all 24 documents:
# the answers the remote tokenizer gets wrong are past the gguf run's first 8), on a shared 2-core host
@pytest.mark.timeout(600)
def test_lm_eval_backends_score_as_llama_cpp_does(
    server: Server, second_server: Server, tmp_path: Path
) -> None:
    gguf_out, remote_out = tmp_path / "gguf", tmp_path / "remote"
    gguf = lm_eval("gguf", f"base_url={server.url}", gguf_out, "--limit", str(GGUF_DOCS))
    remote = lm_eval(
        "local-completions",
        f"model=gemma-test,base_url={second_server.url}/v1/completions,tokenizer_backend=remote",
        remote_out,
    )
    try:
        reference = Reference(flash_attn=True)  # llama-cpp-python's figures meanwhile
        gguf_and_true = [reference.gguf_and_bos(*p) for p in pairs()]
        want_remote = [reference.remote(*p) for p in pairs()]
        gguf_samples, remote_samples = samples(gguf, gguf_out), samples(remote, remote_out)
    finally:
        for run in (gguf, remote):
            if run.poll() is None:
                run.kill()
    assert len(remote_samples) == len(docs()) == 24 and len(gguf_samples) == GGUF_DOCS
    want_gguf = [g for g, _ in gguf_and_true[: 4 * GGUF_DOCS]]
    gguf_acc, remote_acc = check(gguf_samples, want_gguf), check(remote_samples, want_remote)
    # against the model's true log-likelihoods (BOS first): the gguf backend's answers are the true ones;
    # the remote tokenizer's (no BOS, whatever add_bos_token says) are not
    true = [t for _, t in gguf_and_true]
    assert max(abs(g - t) for g, t in gguf_and_true) < TOLERANCE
    assert gguf_acc == accuracy(true[: 4 * GGUF_DOCS], docs()[:GGUF_DOCS])
    differ = sum(r != t for r, t in zip(picks(want_remote), picks(true), strict=True))
    true_acc = accuracy(true, docs())
    print(
        f"lm-eval's remote tokenizer: {differ} of {len(docs())} answers differ from the model's true "
        f"ones, accuracy {remote_acc:.3f} against {true_acc:.3f}"
    )
    assert differ > 0 and remote_acc < true_acc


def picks(scores: list[float]) -> list[int]:
    """The choice each document's four log-likelihoods pick."""
    return [scores[i : i + 4].index(max(scores[i : i + 4])) for i in range(0, len(scores), 4)]


def accuracy(scores: list[float], documents: list[dict[str, Any]]) -> float:
    return sum(p == d["answer"] for p, d in zip(picks(scores), documents, strict=True)) / len(documents)
