"""`llmhost tune`'s options as settings groups (`llmhost.settings.cli`): the SLO and price, where results
go, the workload, its conversations and the search space. Each group builds the tuner's own settings
from its fields; a value that does not fit raises ValueError naming the option."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from llmhost.bench.load.conversations import ConversationSettings, parse_think_time
from llmhost.settings.serve import SERVE_SPEC
from llmhost.settings.setting import required, setting

if TYPE_CHECKING:
    from llmhost.tune import SearchSpace, TuneSLO, Workload
    from llmhost.tune.adapters import Adapters

LORA = SERVE_SPEC["lora"]  # `llmhost serve --lora`: the candidates' servers get the option as given

CONVERSATIONS = ConversationSettings()  # the conversation options' defaults
THINK_TIME = "{:g},{:g}".format(*CONVERSATIONS.think_time_s)


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError as exc:
        raise typer.BadParameter(f"{flag}: comma-separated integers, e.g. 1,2,4") from exc
    return values


def _file(path: Path | None, flag: str) -> str | None:
    if path is not None and not path.is_file():
        raise ValueError(f"{flag} {path}: no such file")
    return str(path) if path else None


@dataclass(frozen=True, kw_only=True)
class SloOptions:
    """The SLO a candidate must meet, and what the host costs."""

    slo_ttft_ms: float = required("SLO: time to first token bound (ms).")
    slo_itl_ms: float = required(
        "SLO: time per output token after the first (TPOT, ms): `llmhost bench --goodput tpot:MS`, not "
        "bench's `itl` (a request's longest gap).",
        flags=("--slo-itl-ms", "--slo-tpot-ms"),
    )
    slo_percentile: int = setting(90, "Percentile the SLO bounds apply at: 50, 90 or 99.")
    price_per_hour: float = required("Price of this host per hour (cost per 1M tokens).")

    def slo(self) -> TuneSLO:
        from llmhost.tune import TuneSLO

        return TuneSLO(self.slo_ttft_ms, self.slo_itl_ms, self.slo_percentile)


@dataclass(frozen=True, kw_only=True)
class OutputOptions:
    """Where the answer goes, and the time the search may take."""

    out: Path = required("Directory for endpoint.yaml, tune.json, report.html.", flags=("--out", "-o"))
    max_minutes: float = setting(30.0, "Time budget for the whole search.")


@dataclass(frozen=True, kw_only=True)
class ConversationOptions:
    """The conversations workload's users."""

    conversations_file: Path | None = setting(
        None, "Conversations: JSONL conversations instead of generated ones."
    )
    turns: int = setting(CONVERSATIONS.turns, "Conversations: turns per user.")
    think_time: str = setting(
        THINK_TIME, "Conversations: think time before each turn, uniform in MIN,MAX seconds."
    )
    system_prompts: int = setting(
        CONVERSATIONS.system_prompts, "Conversations: distinct system prompts shared by groups of users."
    )
    system_prompt_tokens: int = setting(
        CONVERSATIONS.system_prompt_tokens, "Conversations: approximate tokens of each system prompt."
    )
    user_tokens: int = setting(
        CONVERSATIONS.user_tokens, "Conversations: approximate tokens of each user message."
    )

    def settings(self) -> ConversationSettings:
        return ConversationSettings(
            turns=self.turns,
            system_prompts=self.system_prompts,
            system_prompt_tokens=self.system_prompt_tokens,
            user_tokens=self.user_tokens,
            think_time_s=parse_think_time(self.think_time),
            file=_file(self.conversations_file, "--conversations-file"),
        )


@dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    """What each candidate is measured with."""

    workload: str = setting(
        "prompts",
        "prompts, or conversations: each --concurrency level counts users "
        "holding multi-turn conversations (see `llmhost bench run --help`).",
    )
    prompts_file: Path | None = setting(None, "JSONL prompts instead of the built-in set.")
    prompt_tokens: int | None = setting(None, "Synthetic prompts of this many tokens.")
    max_new_tokens: int = setting(64, "Tokens generated per request.")
    num_prompts: int | None = setting(None, "Distinct synthetic prompts (with --prompt-tokens; default 32).")
    requests: int | None = setting(None, "Measured requests per load level (prompts workload; default 16).")
    warmup: int | None = setting(
        None, "Warm-up requests per level, not measured (prompts workload; default 1)."
    )
    concurrency: str = setting("1,2,4,8", "Load levels, rising; stops at saturation.")
    model_mix: str = setting(
        "",
        "Models the requests name, comma-separated, in turn (as `llmhost bench run "
        "--model a,b`): --lora adapters and `model`, the served model's name; figures "
        "per model. Default: `model` alone.",
    )

    def build(self, conversations: ConversationOptions) -> Workload:
        from llmhost.tune import Workload

        if self.num_prompts is not None and self.prompt_tokens is None:
            raise ValueError("--num-prompts applies to synthetic prompts: give --prompt-tokens too")
        talk = None
        if self.workload == "conversations":
            if self.requests is not None or self.warmup is not None:
                raise ValueError(
                    "--requests and --warmup apply to the prompts workload: a level of "
                    "conversations is its users' turns"
                )
            talk = conversations.settings()
        elif self.workload != "prompts":
            raise ValueError(f"--workload: prompts or conversations, got {self.workload!r}")
        return Workload(
            prompts_file=_file(self.prompts_file, "--prompts-file"),
            prompt_tokens=self.prompt_tokens,
            max_new_tokens=self.max_new_tokens,
            num_prompts=self.num_prompts or 32,
            concurrency=_ints(self.concurrency, "--concurrency"),
            requests=16 if self.requests is None else self.requests,
            warmup=1 if self.warmup is None else self.warmup,
            conversations=talk,
            model_mix=tuple(n.strip() for n in self.model_mix.split(",")) if self.model_mix else (),
        )


@dataclass(frozen=True, kw_only=True)
class AdapterOptions:
    """LoRA adapters every candidate's server loads."""

    lora: list[str] | None = setting(
        None,
        f"{LORA.help} Every candidate's server loads it; the endpoint "
        "file's component lists it under `adapters:`.",
        metavar=LORA.metavar,
    )

    def adapters(self) -> Adapters:
        from llmhost.tune.adapters import Adapters

        return Adapters.parse(self.lora or [])


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """The candidates: copies x threads x max_concurrent x max_batch_tokens, quantizations, speculation."""

    copies: str = setting("1", "Copies to try (more than 1: an endpoint).")
    threads: str = setting("", "Threads per copy to try; default 1, 2, 4, ... all CPUs.")
    max_concurrent: str = setting("1,4,8", "max_concurrent values to try.")
    max_batch_tokens: str = setting("512", "max_batch_tokens values to try.")
    quantize: list[str] | None = setting(None, "Also try the model quantized to this type (repeatable).")
    allow_requantize: bool = setting(False, "Allow quantizing a quantized model.")
    speculative: bool = setting(False, "Also try `--speculative ngram` (single copy).")
    router_cpus: int = setting(
        0,
        "CPUs kept for the endpoint router when copies > 1 (its endpoint file's router.num_cpus; 0: the "
        "router shares the copies' CPUs, its cost measured inside each candidate's figures).",
    )
    saturation_gain: float = setting(0.05, "Stop raising the load below this gain.")
    prune_ratio: float = setting(0.8, "Prune regions below this share of the best goodput.")

    def space(self) -> SearchSpace:
        from llmhost.tune import SearchSpace

        return SearchSpace(
            host_cpus=len(os.sched_getaffinity(0)),
            copies=_ints(self.copies, "--copies"),
            threads=_ints(self.threads, "--threads"),
            max_concurrent=_ints(self.max_concurrent, "--max-concurrent"),
            max_batch_tokens=_ints(self.max_batch_tokens, "--max-batch-tokens"),
            quants=(None, *(self.quantize or [])),
            speculative=(False, True) if self.speculative else (False,),
            router_cpus=self.router_cpus,
        )
