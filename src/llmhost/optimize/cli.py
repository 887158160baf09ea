"""`llmhost optimize ...`: quantize, convert, evaluate, build ahead-of-time artifacts.

Heavy modules (llama.cpp, gguf) are imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmhost.store.options import S3EndpointOpt, use_s3_endpoint

if TYPE_CHECKING:
    from llmhost.optimize.merge_step import MergeInput
    from llmhost.optimize.recipe_file import RunRecipe

app = typer.Typer(
    help="Optimize GGUF models: quantize, convert, evaluate, build artifacts.", no_args_is_help=True
)


def _fail(exc: Exception) -> typer.Exit:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    return typer.Exit(2)


MODEL_FORMS = "a .gguf file, a directory holding one, an s3:// or hf:// reference, or 'default'"


def _model(ref: str, s3_endpoint_url: str = "") -> Path:
    """The GGUF a model reference names, as `llmhost serve` takes it (MODEL_FORMS); one that names
    nothing is a usage error (2)."""
    from llmhost.store import ModelNotFoundError, resolve_model

    use_s3_endpoint(s3_endpoint_url)
    try:
        return resolve_model(ref)
    except ModelNotFoundError as exc:
        raise _fail(exc) from exc


@app.command()
def quantize(
    model: Annotated[str, typer.Argument(help=f"Input model (F32/F16/BF16): {MODEL_FORMS}.")],
    type_: Annotated[str, typer.Option("--type", "-t", help="q4_0, q4_K_M, q5_K_M, q8_0, f16, ...")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output GGUF.")],
    allow_requantize: Annotated[
        bool, typer.Option(help="Allow quantizing an already quantized model (loses quality).")
    ] = False,
    threads: Annotated[int, typer.Option(help="Quantizer threads; 0: all.")] = 0,
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Quantize a GGUF with llama.cpp's quantizer."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from llmhost.optimize.quantize import QuantizeError
    from llmhost.optimize.quantize import quantize as run

    source = _model(model, s3_endpoint_url)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(f"quantizing to {type_}", total=None)

        def progress(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, description=f"{type_}: {name}")

        try:
            result = run(source, out, type_, allow_requantize, progress, threads)
        except QuantizeError as exc:
            raise _fail(exc) from exc
    typer.echo(
        f"{result.path}: {result.source_type} -> {result.qtype}, "
        f"{result.in_bytes / 2**20:.1f} MiB -> {result.out_bytes / 2**20:.1f} MiB in {result.seconds:.1f} s"
    )


MERGE_HELP = (
    "LoRA adapter to merge into the model, PATH[:SCALE] (PATH: a .gguf file, a directory holding one, "
    "an s3:// or hf:// reference; SCALE default 1). Repeatable: merged in order."
)


def _merge_inputs(texts: list[str]) -> list[MergeInput]:
    from llmhost.optimize.merge_step import merge_inputs
    from llmhost.store import ModelNotFoundError

    try:
        return merge_inputs(texts)
    except ModelNotFoundError as exc:
        raise _fail(exc) from exc


@app.command("merge-lora")
def merge_lora_(
    model: Annotated[str, typer.Argument(help=f"Base model: {MODEL_FORMS}.")],
    lora: Annotated[list[str], typer.Option("--lora", help=MERGE_HELP)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output GGUF.")],
    merge_type: Annotated[str, typer.Option(help="Type of the merged weights: f16 or f32.")] = "f16",
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Merge LoRA adapters into their base model: a new GGUF (quantize it with `quantize`)."""
    from rich.progress import Progress

    from llmhost.optimize.lora_merge import MergeError, merge_lora

    source = _model(model, s3_endpoint_url)
    inputs = _merge_inputs(lora)
    with Progress(transient=True) as bar:
        task = bar.add_task("merging", total=None)
        try:
            result = merge_lora(
                source,
                [(a["path"], a["scale"]) for a in inputs],
                out,
                merge_type,
                lambda done, total, name: bar.update(task, completed=done, total=total, description=name),
            )
        except MergeError as exc:
            raise _fail(exc) from exc
    names = ", ".join(f"{a['name']}*{a['scale']:g}" for a in inputs)
    typer.echo(
        f"{result.path}: {names} merged into {len(result.merged)} weights ({merge_type}), "
        f"{result.out_bytes / 2**20:.1f} MiB in {result.seconds:.1f} s"
    )


@app.command()
def convert(
    hf_dir: Annotated[
        Path, typer.Argument(help="Hugging Face model directory (config.json, *.safetensors).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output GGUF.")],
    outtype: Annotated[str, typer.Option(help="f16 or f32.")] = "f16",
) -> None:
    """Convert a Hugging Face safetensors llama checkpoint to GGUF."""
    from rich.progress import Progress

    from llmhost.optimize.convert import ConvertError, convert_hf

    with Progress() as bar:
        task = bar.add_task("converting", total=None)
        try:
            result = convert_hf(
                hf_dir, out, outtype, lambda d, t, n: bar.update(task, completed=d, total=t, description=n)
            )
        except (ConvertError, OSError) as exc:
            raise _fail(exc) from exc
    for warning in result.warnings:
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    size = result.path.stat().st_size / 2**20
    typer.echo(f"{result.path}: {result.n_tensors} tensors, {result.n_params:,} parameters, {size:.1f} MiB")


@app.command("eval")
def eval_(
    model: Annotated[str, typer.Argument(help=f"Model to evaluate: {MODEL_FORMS}.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="quality.json to write.")] = Path("quality.json"),
    base: Annotated[str | None, typer.Option(help="Base model for greedy agreement (same forms).")] = None,
    window: Annotated[int, typer.Option(help="Perplexity window, tokens.")] = 256,
    max_tokens: Annotated[int, typer.Option(help="Score only this many text tokens; 0: all.")] = 0,
    threads: Annotated[int, typer.Option(help="Threads; 0: the CPUs available.")] = 0,
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Perplexity on the shipped text sample, and greedy agreement with --base."""
    from llmhost.engine import ModelLoadError
    from llmhost.optimize.quality import evaluate, write_quality

    model_path = _model(model, s3_endpoint_url)
    base_path = _model(base) if base is not None else None
    try:
        result = evaluate(model_path, base_path, window=window, max_tokens=max_tokens, threads=threads)
    except (ModelLoadError, ValueError) as exc:
        raise _fail(exc) from exc
    write_quality(result, out)
    ppl = result["perplexity"]
    line = f"perplexity {ppl['perplexity']:.4f} over {ppl['tokens_scored']} tokens"
    if result["greedy_agreement"] is not None:
        line += f"; greedy agreement with base {result['greedy_agreement']['agreement']:.3f}"
    typer.echo(f"{line} -> {out}")


@app.command()
def artifact(
    model: Annotated[str, typer.Argument(help=f"Source model: {MODEL_FORMS}.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Artifact directory.")],
    quantize: Annotated[str | None, typer.Option("--quantize", help="Quantization type to apply.")] = None,
    allow_requantize: Annotated[bool, typer.Option(help="Allow re-quantizing a quantized source.")] = False,
    system_prompt_file: Annotated[
        Path | None, typer.Option(help="System prompt whose KV state is saved into the artifact.")
    ] = None,
    system_prompt_mode: Annotated[
        str, typer.Option(help="chat: as the chat template writes it; raw: the text itself.")
    ] = "chat",
    chat_template: Annotated[
        Path | None, typer.Option(help="Jinja chat template serving will use (as serve --chat-template).")
    ] = None,
    flash_attn: Annotated[
        bool, typer.Option(help="Serving flash-attention setting the state is for.")
    ] = True,
    eval_max_tokens: Annotated[int, typer.Option(help="Perplexity tokens scored; 0: all.")] = 0,
    threads: Annotated[int, typer.Option(help="Threads; 0: the CPUs available.")] = 0,
    merge_lora: Annotated[list[str] | None, typer.Option("--merge-lora", help=MERGE_HELP)] = None,
    merge_type: Annotated[str, typer.Option(help="Type of the merged weights: f16 or f32.")] = "f16",
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Build an ahead-of-time artifact directory, or reuse it when its key matches."""
    from llmhost.engine import ModelLoadError
    from llmhost.optimize.artifact import ArtifactError, Recipe, build_or_reuse
    from llmhost.optimize.lora_merge import MergeError
    from llmhost.optimize.quantize import QuantizeError

    source = _model(model, s3_endpoint_url)
    try:
        recipe = Recipe(
            quantize=quantize,
            allow_requantize=allow_requantize,
            system_prompt=system_prompt_file.read_text() if system_prompt_file else None,
            system_prompt_mode=system_prompt_mode,
            chat_template=chat_template.read_text() if chat_template else None,
            flash_attn=flash_attn,
            merge_lora=_merge_inputs(merge_lora or []),
            merge_type=merge_type,
        )
        result = build_or_reuse(
            source, out, recipe, say=typer.echo, threads=threads, eval_max_tokens=eval_max_tokens
        )
    except (ArtifactError, QuantizeError, MergeError, ModelLoadError, FileNotFoundError) as exc:
        raise _fail(exc) from exc
    summary = {"directory": str(result.directory), "key": result.key, "reused": result.reused}
    typer.echo(json.dumps(summary))


@app.command("run")
def run_(
    recipe_file: Annotated[Path, typer.Argument(help="Recipe YAML: model, techniques, benchmark settings.")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Artifact directory (default: the recipe's `out`).")
    ] = None,
    prompts_file: Annotated[
        Path | None, typer.Option(help="JSONL prompts to benchmark on (overrides the recipe's).")
    ] = None,
    requests: Annotated[int | None, typer.Option(help="Measured requests per server.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Concurrent requests.")] = None,
    price_per_hour: Annotated[float | None, typer.Option(help="Instance price, USD per hour.")] = None,
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Apply a recipe, then benchmark the base model against the artifact in the same run."""
    use_s3_endpoint(s3_endpoint_url)  # the recipe's `model:` may be an s3:// reference
    from rich.console import Console

    from llmhost.engine import ModelLoadError
    from llmhost.optimize.artifact import ArtifactError
    from llmhost.optimize.quantize import QuantizeError
    from llmhost.optimize.recipe_file import RecipeError, default_out, load_recipe
    from llmhost.optimize.recipe_run import run_recipe
    from llmhost.optimize.recipe_run import table as result_table
    from llmhost.store import ModelNotFoundError

    try:
        recipe = load_recipe(recipe_file)
        benchmark = {
            "prompts_file": str(prompts_file.resolve()) if prompts_file else None,
            "requests": requests,
            "concurrency": concurrency,
            "price_per_hour": price_per_hour,
        }
        recipe = _overridden(recipe, {k: v for k, v in benchmark.items() if v is not None})
        target = out or (Path(recipe.out) if recipe.out else default_out(recipe_file))
        result = run_recipe(recipe, target, say=typer.echo)
    except (RecipeError, ArtifactError, QuantizeError, ModelLoadError, ModelNotFoundError) as exc:
        raise _fail(exc) from exc
    console = Console()
    console.print(result_table(result))
    console.print(_quality_line(result.artifact.directory))
    console.print(
        f"artifact: {result.artifact.directory} (serve it: llmhost serve {result.artifact.directory})"
    )


def _overridden(recipe: RunRecipe, benchmark: dict[str, Any]) -> RunRecipe:
    """The recipe with the command line's benchmark settings, validated like the file's own."""
    from llmhost.optimize.recipe_file import parse_recipe

    if not benchmark:
        return recipe
    data = recipe.model_dump(exclude_unset=True)
    data["benchmark"] = {**data.get("benchmark", {}), **benchmark}
    return parse_recipe(data, ".", "recipe with options")


def _quality_line(directory: Path) -> str:
    """The artifact's perplexity, and beside the base model's where it was quantized."""
    quality = json.loads((directory / "quality.json").read_text())
    line = f"perplexity {quality['perplexity']['perplexity']:.3f}"
    if quality.get("base_perplexity"):
        line += f" (base {quality['base_perplexity']['perplexity']:.3f})"
    if quality.get("greedy_agreement"):
        line += f", greedy agreement with base {quality['greedy_agreement']['agreement']:.3f}"
    return line
