"""A recipe file of `llmhost optimize run`, read and checked (`load_recipe`, `parse_recipe`);
`recipe_run` carries it out.

A recipe names a model, the techniques applied to it and the workload both are measured on::

    model: default                  # 'default', a .gguf file or a directory holding one
    out: gemma-q8                   # artifact directory (relative to this file); --out overrides
    merge_lora: [tone.gguf:0.8]     # 1. LoRA adapters merged in (PATH[:SCALE]), merge_type: f16
    quantize: q8_0                  # 2. quantization (llama.cpp's quantizer)
    allow_requantize: true
    system_prompt_file: system.txt  # 3. the system prompt's KV state saved into the artifact
    system_prompt_mode: chat        #    (or system_prompt: "..."; chat | raw)
    speculative: ngram              # 4. serving setting recorded in recipe.yaml: n-gram speculation
    draft_tokens: 12
    benchmark:
      prompts_file: prompts.jsonl   # else the built-in prompt set
      requests: 16
      concurrency: 1
      max_new_tokens: 64
      price_per_hour: 0.0832
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from llmhost.errors import BadRequestError
from llmhost.optimize.artifact import Recipe
from llmhost.shared import yamltext


class RecipeError(BadRequestError, ValueError):
    """The recipe file is invalid, or running it failed."""


class BenchmarkSettings(BaseModel):
    """The workload base and optimized are both measured on (one closed-loop level)."""

    model_config = ConfigDict(extra="forbid")

    prompts_file: str | None = None  # JSONL, as `llmhost bench run --prompts-file`
    builtin_prompts: bool = True  # without prompts_file: the built-in set; false: synthetic prompts
    prompt_tokens: int = Field(default=128, ge=1)  # synthetic prompts only
    api: Literal["openai", "chat"] = "openai"
    requests: int = Field(default=8, ge=1)
    warmup: int = Field(default=1, ge=0)
    concurrency: int = Field(default=1, ge=1)
    max_new_tokens: int = Field(default=64, ge=1)
    price_per_hour: float | None = Field(default=None, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)
    startup_timeout_s: float = Field(default=300.0, gt=0)


class RunRecipe(BaseModel):
    """A recipe file. Relative paths are relative to the file."""

    model_config = ConfigDict(extra="forbid")

    model: str = "default"
    out: str | None = None
    merge_lora: list[str] = Field(default_factory=list)  # adapters, PATH[:SCALE], merged in order
    merge_type: Literal["f16", "f32"] = "f16"
    quantize: str | None = None
    allow_requantize: bool = False
    system_prompt: str | None = None
    system_prompt_file: str | None = None
    system_prompt_mode: Literal["chat", "raw"] = "chat"
    chat_template_file: str | None = None  # the template serving uses (passed to both servers)
    flash_attn: bool = True
    speculative: Literal["ngram"] | None = None
    draft_tokens: int = Field(default=12, ge=1, le=64)
    ngram_size: int = Field(default=3, ge=2, le=16)
    threads: int = Field(default=0, ge=0)  # build, evaluation and both servers; 0: all CPUs
    eval_max_tokens: int = Field(default=0, ge=0)  # perplexity tokens scored; 0: all of the sample
    benchmark: BenchmarkSettings = Field(default_factory=BenchmarkSettings)

    @field_validator("quantize")
    @classmethod
    def _known_type(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from llmhost.optimize.quantize import QUANT_TYPES

        if v not in QUANT_TYPES:
            raise ValueError(f"unknown quantization type {v!r}; one of {', '.join(QUANT_TYPES)}")
        return v

    @model_validator(mode="after")
    def _one_system_prompt(self) -> RunRecipe:
        if self.system_prompt is not None and self.system_prompt_file is not None:
            raise ValueError("give system_prompt or system_prompt_file, not both")
        if self.system_prompt is not None and not self.system_prompt.strip():
            raise ValueError("system_prompt is empty")
        return self

    def artifact_recipe(self) -> Recipe:
        """What `build_or_reuse` applies (files already resolved by `load_recipe`)."""
        system = self.system_prompt
        if self.system_prompt_file is not None:
            system = Path(self.system_prompt_file).read_text(encoding="utf-8")
        template = None
        if self.chat_template_file is not None:
            template = Path(self.chat_template_file).read_text(encoding="utf-8")
        from llmhost.optimize.merge_step import merge_inputs

        return Recipe(
            merge_lora=merge_inputs(self.merge_lora, "merge_lora:"),
            merge_type=self.merge_type,
            quantize=self.quantize,
            allow_requantize=self.allow_requantize,
            system_prompt=system,
            system_prompt_mode=self.system_prompt_mode,
            chat_template=template,
            flash_attn=self.flash_attn,
        )

    def serving(self) -> dict[str, Any]:
        """Serving settings recorded in the artifact's recipe.yaml; {} without speculation."""
        if self.speculative is None:
            return {}
        return {
            "speculative": self.speculative,
            "draft_tokens": self.draft_tokens,
            "ngram_size": self.ngram_size,
        }


def _format_errors(where: str, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key")
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(
                f"  {loc}: {msg} (got {err.get('input')!r})" if "input" in err else f"  {loc}: {msg}"
            )
    return f"{where}: invalid recipe:\n" + "\n".join(lines)


def parse_recipe(data: Any, base_dir: str | Path = ".", where: str = "recipe") -> RunRecipe:
    """Validate a recipe mapping; resolve its file paths against `base_dir` and check they exist."""
    if not isinstance(data, dict):
        raise RecipeError(f"{where}: a recipe is a YAML mapping")
    try:
        recipe = RunRecipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(_format_errors(where, exc)) from None
    base = Path(base_dir)

    def resolve(value: str | None) -> str | None:
        if value is None:
            return None
        p = Path(value).expanduser()
        return str(p if p.is_absolute() else base / p)

    if recipe.model != "default" and "://" not in recipe.model:  # s3://, hf:// are no paths
        recipe.model = resolve(recipe.model) or recipe.model
    recipe.out = resolve(recipe.out)
    recipe.merge_lora = [_resolved_scaled(text, resolve) for text in recipe.merge_lora]
    for key in ("system_prompt_file", "chat_template_file"):
        path = resolve(getattr(recipe, key))
        if path is not None and not Path(path).is_file():
            raise RecipeError(f"{where}: {key}: {path} does not exist")
        setattr(recipe, key, path)
    bench = recipe.benchmark
    bench.prompts_file = resolve(bench.prompts_file)
    if bench.prompts_file is not None:
        from llmhost.bench.load.workload import load_prompts_file

        try:
            load_prompts_file(bench.prompts_file)
        except (OSError, ValueError) as exc:
            raise RecipeError(f"{where}: benchmark.prompts_file: {exc}") from None
    if recipe.system_prompt_file is not None and not Path(recipe.system_prompt_file).read_text().strip():
        raise RecipeError(f"{where}: system_prompt_file: {recipe.system_prompt_file} is empty")
    return recipe


def _resolved_scaled(text: str, resolve: Callable[[str | None], str | None]) -> str:
    """A `PATH[:SCALE]` with a relative PATH made relative to the recipe file (s3://, hf:// kept)."""
    from llmhost.engine.lora import parse_scaled

    ref, scale = parse_scaled(text)
    if "://" in ref:
        return text
    return f"{resolve(ref)}:{scale!r}"


def load_recipe(path: str | Path) -> RunRecipe:
    p = Path(path)
    try:
        data = yamltext.load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecipeError(f"cannot read recipe {p}: {exc}") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{p}: not YAML: {exc}") from None
    return parse_recipe(data, p.resolve().parent, str(p))


def default_out(recipe_path: str | Path) -> Path:
    p = Path(recipe_path)
    return p.resolve().parent / f"{p.stem}-artifact"
