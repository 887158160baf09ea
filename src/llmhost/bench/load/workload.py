"""What the load generator sends: synthetic prompts of an exact token length, a user's JSONL file, or
the built-in set of realistic prompts shipped with the package.

Exact lengths need the target's tokenizer: llmhost and llama.cpp's ``llama-server`` expose
``POST /tokenize`` (``{"content": str}`` → ``{"tokens": [int]}``) and ``POST /detokenize``. Without
them the length is approximated at 4 characters per token, and the summary says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from llmhost.bench.load.http import simple_request

CHARS_PER_TOKEN = 4
METHOD_TOKENIZE = "tokenize"
METHOD_APPROX = f"approx_{CHARS_PER_TOKEN}_chars_per_token"


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int  # prompt length in tokens: exact when ``exact``, else approximated
    exact: bool
    max_new_tokens: int | None = None  # per-prompt override (JSONL files may set it)


@dataclass(frozen=True)
class Workload:
    prompts: list[Prompt]
    source: str  # "synthetic", "builtin" or "file:<path>"
    token_count_method: str  # METHOD_TOKENIZE or METHOD_APPROX

    def describe(self) -> dict[str, Any]:
        lengths = [p.tokens for p in self.prompts]
        return {
            "source": self.source,
            "prompts": len(self.prompts),
            "prompt_tokens_min": min(lengths) if lengths else 0,
            "prompt_tokens_max": max(lengths) if lengths else 0,
            "prompt_tokens_mean": sum(lengths) / len(lengths) if lengths else 0.0,
            "token_count_method": self.token_count_method,
            "all_exact": all(p.exact for p in self.prompts),
        }


class Tokenizer:
    """The target's ``/tokenize`` and ``/detokenize`` routes."""

    def __init__(self, base_url: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    async def tokenize(self, text: str) -> list[int]:
        status, body = await simple_request(
            f"{self.base_url}/tokenize", "POST", json.dumps({"content": text}).encode(), self.timeout_s
        )
        if status != 200:
            raise RuntimeError(f"/tokenize answered {status}: {body[:200]!r}")
        tokens = json.loads(body)["tokens"]
        # llama-server may answer [{"id":..,"piece":..}] when asked for pieces; we never ask.
        return [int(t) for t in tokens]

    async def detokenize(self, tokens: list[int]) -> str:
        status, body = await simple_request(
            f"{self.base_url}/detokenize", "POST", json.dumps({"tokens": tokens}).encode(), self.timeout_s
        )
        if status != 200:
            raise RuntimeError(f"/detokenize answered {status}: {body[:200]!r}")
        return str(json.loads(body)["content"])

    @classmethod
    async def probe(cls, base_url: str) -> Tokenizer | None:
        """The tokenizer when the target exposes one that round-trips, else ``None``."""
        tok = cls(base_url, timeout_s=10.0)
        try:
            tokens = await tok.tokenize("Hello world, this is a probe.")
            if not tokens:
                return None
            await tok.detokenize(tokens)
        except Exception:
            return None
        return tok


def _read_jsonl(lines: list[str], where: str) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}:{n}: not JSON: {exc}") from exc
        if isinstance(obj, str):
            out.append((obj, None))
            continue
        if not isinstance(obj, dict):
            raise ValueError(f"{where}:{n}: expected a string or an object with 'prompt'")
        text = obj.get("prompt", obj.get("text", obj.get("inputs")))
        if not isinstance(text, str) or not text:
            raise ValueError(f"{where}:{n}: no 'prompt' string")
        max_new = obj.get("max_new_tokens", obj.get("max_tokens"))
        if max_new is not None and not isinstance(max_new, int):
            raise ValueError(f"{where}:{n}: max_new_tokens must be an integer")
        out.append((text, max_new))
    if not out:
        raise ValueError(f"{where}: no prompts")
    return out


def load_prompts_file(path: str | Path) -> list[tuple[str, int | None]]:
    """Prompts of a JSONL file: each line a string or ``{"prompt": str, "max_new_tokens"?: int}``."""
    p = Path(path)
    return _read_jsonl(p.read_text(encoding="utf-8").splitlines(), str(p))


def builtin_prompts() -> list[tuple[str, int | None]]:
    """The realistic prompts shipped with the package (questions, chores, code, long instructions)."""
    text = resources.files("llmhost.bench").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return _read_jsonl(text.splitlines(), "builtin prompts")


def _corpus() -> str:
    return "\n\n".join(text for text, _ in builtin_prompts())


async def synthetic_workload(prompt_tokens: int, count: int, tokenizer: Tokenizer | None) -> Workload:
    """``count`` distinct prompts of ``prompt_tokens`` tokens each, cut from different offsets of a
    text corpus (distinct starts, so a server's prefix cache cannot answer them from one another).
    """
    if prompt_tokens < 1:
        raise ValueError("prompt_tokens must be at least 1")
    corpus = _corpus()
    if tokenizer is None:
        chars = prompt_tokens * CHARS_PER_TOKEN
        text = corpus
        while len(text) < chars + count * 97:
            text += "\n\n" + corpus
        approx = [Prompt(text[i * 97 : i * 97 + chars], prompt_tokens, exact=False) for i in range(count)]
        return Workload(approx, "synthetic", METHOD_APPROX)

    corpus_tokens = await tokenizer.tokenize(corpus)
    pool = list(corpus_tokens)
    while len(pool) < 2 * prompt_tokens + count * 16:
        pool.extend(corpus_tokens)
    span = len(pool) - prompt_tokens - prompt_tokens // 2
    stride = max(1, span // max(1, count))
    prompts: list[Prompt] = []
    for i in range(count):
        start = (i * stride) % max(1, span)
        toks = pool[start : start + prompt_tokens]
        text = ""
        exact = False
        for _ in range(5):
            text = (await tokenizer.detokenize(toks)).lstrip()
            again = await tokenizer.tokenize(text)
            if len(again) == prompt_tokens:
                exact = True
                break
            if len(again) > prompt_tokens:
                toks = again[:prompt_tokens]
            else:
                more = prompt_tokens - len(again)
                toks = again + pool[start + prompt_tokens : start + prompt_tokens + more]
        prompts.append(Prompt(text, prompt_tokens, exact=exact))
    return Workload(prompts, "synthetic", METHOD_TOKENIZE)


async def listed_workload(
    items: list[tuple[str, int | None]], source: str, tokenizer: Tokenizer | None
) -> Workload:
    """Given prompts, with their lengths measured by the tokenizer when there is one."""
    prompts: list[Prompt] = []
    for text, max_new in items:
        if tokenizer is not None:
            n = len(await tokenizer.tokenize(text))
            prompts.append(Prompt(text, n, exact=True, max_new_tokens=max_new))
        else:
            n = max(1, round(len(text) / CHARS_PER_TOKEN))
            prompts.append(Prompt(text, n, exact=False, max_new_tokens=max_new))
    return Workload(prompts, source, METHOD_TOKENIZE if tokenizer is not None else METHOD_APPROX)
