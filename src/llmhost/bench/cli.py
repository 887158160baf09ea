"""``llmhost bench``: run, sweep, compare."""

from __future__ import annotations

import inspect
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from llmhost.bench.config import BenchConfig
from llmhost.bench.figures.compare import compare_results
from llmhost.bench.figures.metrics import LevelSummary
from llmhost.bench.figures.slo import HELP as GOODPUT_HELP
from llmhost.bench.figures.slo import parse_goodput
from llmhost.bench.load.loadgen import LevelState
from llmhost.bench.load.server_metrics import SHOWN
from llmhost.bench.results import BenchResults, load_results
from llmhost.bench.runner import run_benchmark
from llmhost.bench.sweep import SweepSpec, run_sweep
from llmhost.store.options import S3EndpointOpt, use_s3_endpoint

app = typer.Typer(
    help="Load tests: latency, throughput and cost per 1M tokens against any LLM server; sweeps.",
    no_args_is_help=True,
)


def _make_console() -> Console:
    con = Console()
    # Not a terminal (CI logs, pipes): wide enough for the tables rather than rich's 80 columns.
    return con if con.is_terminal else Console(width=200)


console = _make_console()


def _default_out() -> Path:
    return Path("bench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1000:.1f}"


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "–" if v is None else format(v, fmt)


class LiveProgress:
    """Rich live display of the level being measured."""

    def __init__(self, con: Console) -> None:
        self.console = con
        self.state: LevelState | None = None
        self.status = ""
        self.done: list[LevelSummary] = []
        self.live = Live(self, console=con, refresh_per_second=4, transient=True)

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def message(self, text: str) -> None:
        self.status = text
        self.console.print(f"[dim]{text}[/dim]")

    def level_started(self, state: LevelState) -> None:
        self.state = state
        self.status = ""

    def level_finished(self, summary: LevelSummary) -> None:
        self.done.append(summary)
        self.state = None
        if summary.items:  # a retrieval level: nothing generated, no TTFT
            self.console.print(
                f"  {summary.config} {summary.level}: {summary.requests} requests, "
                f"{summary.success_pct:.1f}% ok, {summary.items_per_s:.1f} items/s, "
                f"{summary.input_tokens_per_s:.1f} input tok/s, p50 E2E {_ms(summary.get('e2e_s_p50'))} ms"
            )
            return
        self.console.print(
            f"  {summary.config} {summary.level}: {summary.requests} requests, "
            f"{summary.success_pct:.1f}% ok, {summary.output_tokens_per_s:.1f} output tok/s, "
            f"p50 TTFT {_ms(summary.get('ttft_s_p50'))} ms, p50 TPOT {_ms(summary.get('tpot_s_p50'))} ms, "
            f"p50 ITL {_ms(summary.get('itl_s_p50'))} ms"
            + (f", goodput {summary.goodput_rps:.2f} req/s" if summary.goodput_rps is not None else "")
        )

    def __rich__(self) -> Group:
        st = self.state
        if st is None:
            return Group(Text(self.status, style="dim"))
        elapsed = time.perf_counter() - st.started_at
        if st.warmup:
            line = f"{st.config} {st.level}: warming up"
        else:
            goal = []
            if st.target_requests is not None:
                goal.append(f"{st.done}/{st.target_requests} requests")
            if st.duration_s is not None:
                goal.append(f"{min(elapsed, st.duration_s):.0f}/{st.duration_s:.0f} s")
            tok_s = st.output_tokens / elapsed if elapsed > 0 else 0.0
            line = (
                f"{st.config} {st.level}: {' · '.join(goal)} · {st.ok} ok · {st.errors} errors · "
                f"{tok_s:.1f} output tok/s"
            )
        return Group(Text(line, style="bold cyan"))


def levels_table(results: BenchResults) -> Table:
    t = Table(title="llmhost bench", show_lines=False)
    for col in (
        "config",
        "level",
        "req",
        "ok %",
        "req/s",
        "goodput req/s",
        "out tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "ITL p50 ms",
        "ms/token p50",
        "E2E p50 s",
        "min/1M",
        "$/1M",
        "blended $/1M",
        "errors",
    ):
        t.add_column(col, justify="left" if col in ("config", "level", "errors") else "right")
    for lv in results.levels():
        errs = ", ".join(f"{k}={v}" for k, v in sorted(lv.errors.items()))
        if lv.stopped:
            errs = f"{errs} (stopped: {lv.stopped})".strip()
        t.add_row(
            lv.config,
            lv.level,
            str(lv.requests),
            f"{lv.success_pct:.1f}",
            _num(lv.requests_per_s, ".2f"),
            _num(lv.goodput_rps, ".2f"),
            _num(lv.output_tokens_per_s),
            _ms(lv.get("ttft_s_p50")),
            _ms(lv.get("ttft_s_p99")),
            _ms(lv.get("tpot_s_p50")),
            _ms(lv.get("itl_s_p50")),
            _num(lv.get("ms_per_token_p50")),
            _num(lv.get("e2e_s_p50"), ".3f"),
            _num(lv.minutes_per_1m_tokens),
            _num(lv.cost_per_1m_tokens_usd, ".3f"),
            _num(lv.blended_price_per_1m_tokens_usd, ".3f"),
            errs or "–",
        )
    for c in results.configs:
        if c.error:
            t.add_row(c.name, "–", *["" for _ in range(14)], f"failed: {c.error.splitlines()[0][:60]}")
    return t


def server_table(results: BenchResults) -> Table | None:
    """Server-side figures of the levels whose target exposed /metrics."""
    levels = [lv for lv in results.levels() if lv.server_figures]
    shown = [(k, label, fmt) for k, label, fmt in SHOWN if any(k in lv.server_figures for lv in levels)]
    if not shown:
        return None
    t = Table(title="Server metrics (/metrics)")
    for col in ("config", "level", *(label for _, label, _ in shown)):
        t.add_column(col, justify="left" if col in ("config", "level") else "right")
    for lv in levels:
        t.add_row(lv.config, lv.level, *(_num(lv.server_figures.get(k), fmt) for k, _, fmt in shown))
    return t


def conversations_table(results: BenchResults) -> Table | None:
    """Conversations: TTFT by turn, the later turns', goodput and the server's prefix reuse."""
    levels = [lv for lv in results.levels() if lv.conversations is not None]
    if not levels:
        return None
    turns = sorted(
        {
            int(k[4:].split("_", 1)[0])
            for lv in levels
            for k in lv.distributions
            if k.startswith("turn") and k.endswith("_p50")
        }
    )
    t = Table(title="Conversations (TTFT ms by turn: p50 / p90 / p99)")
    for col in (
        "config",
        "level",
        "done / cut / unfinished",
        *(f"turn {n}" for n in turns),
        "later turns p50 / p90",
        "goodput req/s",
        "prefix reuse",
    ):
        t.add_column(col, justify="left" if col in ("config", "level") else "right")
    for lv in levels:
        c = lv.conversations or {}
        by_turn = [
            " / ".join(_ms(lv.get(f"turn{n}_ttft_s_{q}")) for q in ("p50", "p90", "p99")) for n in turns
        ]
        later = " / ".join(_ms(lv.get(f"later_turn_ttft_s_{q}")) for q in ("p50", "p90"))
        counts = f"{c.get('completed', 0)} / {c.get('cut', 0)} / {c.get('unfinished', 0)}"
        t.add_row(
            lv.config,
            lv.level,
            counts,
            *by_turn,
            later,
            _num(lv.goodput_rps, ".2f"),
            _num(lv.server_figures.get("server_prefix_reuse"), ".3f"),
        )
    return t


def retrieval_table(results: BenchResults) -> Table | None:
    """Embed and rerank levels: inputs (documents) per second, the tokens the server counted, latency."""
    levels = [lv for lv in results.levels() if lv.items]
    if not levels:
        return None
    t = Table(title="Retrieval (embed: inputs; rerank: documents)")
    for col in ("config", "level", "items/s", "input tok/s", "req/s", "E2E p50 ms", "E2E p90 ms"):
        t.add_column(col, justify="left" if col in ("config", "level") else "right")
    for lv in levels:
        t.add_row(
            lv.config,
            lv.level,
            _num(lv.items_per_s),
            _num(lv.input_tokens_per_s),
            _num(lv.requests_per_s, ".2f"),
            _ms(lv.get("e2e_s_p50")),
            _ms(lv.get("e2e_s_p90")),
        )
    return t


def thinking_table(results: BenchResults) -> Table | None:
    """Thinking models: the thought's and the answer's tokens apart, and TTFT to the first answer token
    beside TTFT to the first token (of the thought)."""
    levels = [lv for lv in results.levels() if lv.reasoning_tokens]
    if not levels:
        return None
    t = Table(title="Thinking (thought vs answer)")
    for col in (
        "config",
        "level",
        "thought tokens",
        "answer tokens",
        "TTFT p50 ms",
        "answer TTFT p50 ms",
        "answer TTFT p99 ms",
    ):
        t.add_column(col, justify="left" if col in ("config", "level") else "right")
    for lv in levels:
        t.add_row(
            lv.config,
            lv.level,
            str(lv.reasoning_tokens),
            str(lv.output_tokens - lv.reasoning_tokens),
            _ms(lv.get("ttft_s_p50")),
            _ms(lv.get("answer_ttft_s_p50")),
            _ms(lv.get("answer_ttft_s_p99")),
        )
    return t


def images_table(results: BenchResults) -> Table | None:
    """Requests with images (`--images`): the server's encode time per request beside TTFT."""
    levels = [lv for lv in results.levels() if lv.images]
    if not levels:
        return None
    t = Table(title="Images (encode: the server's time in the projector's encoder, per request)")
    for col in ("config", "level", "images / request", "encode p50 ms", "encode p90 ms", "TTFT p50 ms"):
        t.add_column(col, justify="left" if col in ("config", "level") else "right")
    for lv in levels:
        t.add_row(
            lv.config,
            lv.level,
            _num(lv.images / lv.successes if lv.successes else None, ".0f"),
            _num(lv.get("encode_ms_p50"), ".1f"),
            _num(lv.get("encode_ms_p90"), ".1f"),
            _ms(lv.get("ttft_s_p50")),
        )
    return t


def models_table(results: BenchResults) -> Table | None:
    """A mix of models (`--model a,b`): each level's figures model by model."""
    levels = [lv for lv in results.levels() if lv.by_model]
    if not levels:
        return None
    t = Table(title="By model (a mix of models, sent in turn)")
    for col in (
        "config",
        "level",
        "model",
        "ok / requests",
        "out tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "e2e p50 ms",
    ):
        t.add_column(col, justify="left" if col in ("config", "level", "model") else "right")
    for lv in levels:
        for name, f in lv.by_model.items():
            num = {k: float(v) for k, v in f.items() if isinstance(v, (int, float))}
            times = [_ms(num.get(k)) for k in ("ttft_s_p50", "ttft_s_p99", "tpot_s_p50", "e2e_s_p50")]
            t.add_row(
                lv.config,
                lv.level,
                name,
                f"{f['successes']} / {f['requests']}",
                _num(num.get("output_tokens_per_s")),
                *times,
            )
    return t


def recommendations_table(results: BenchResults) -> Table:
    t = Table(title="Recommendations")
    for col in ("goal", "configuration", "level", "out tok/s", "ms/token p50", "TTFT p50 ms", "$/1M", "why"):
        t.add_column(col)
    for r in results.recommendations:
        f = r.figures
        t.add_row(
            r.title,
            r.config or "–",
            r.level or "–",
            _num(f.get("output_tokens_per_s")),
            _num(f.get("ms_per_token_p50")),
            _ms(f.get("ttft_s_p50")),
            _num(f.get("cost_per_1m_tokens_usd"), ".3f"),
            r.note,
        )
    return t


def _print_final(results: BenchResults, out: Path | None) -> None:
    console.print(levels_table(results))
    for extra in (
        retrieval_table(results),
        models_table(results),
        conversations_table(results),
        thinking_table(results),
        images_table(results),
        server_table(results),
    ):
        if extra is not None:
            console.print(extra)
    for c in results.configs:
        if c.stopped:
            console.print(f"[yellow]{c.name}: load stopped ({c.stopped}): {c.stop_detail}[/yellow]")
        elif c.saturated_at:
            console.print(f"[yellow]{c.name}: saturated at {c.saturated_at}[/yellow]")
    if len(results.configs) > 1 or any(r.goal == "slo" for r in results.recommendations):
        console.print(recommendations_table(results))
    if results.interrupted:
        console.print("[yellow]Interrupted: results cover what was measured before the stop.[/yellow]")
    if out is not None:
        console.print(f"Results: {out}/ (requests.jsonl, summary.json, summary.csv, report.html)")


def _run_parameters() -> list[inspect.Parameter]:
    """`bench run`'s options: BenchConfig's fields' (RunOption), then the run's own."""
    params: list[inspect.Parameter] = []
    types = get_type_hints(BenchConfig)
    for name, option, default in BenchConfig.run_options():
        kind = option.kind if option.kind is not None else types[name]
        params.append(
            inspect.Parameter(
                option.flag or name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if name == "url" else default,
                annotation=Annotated[kind, typer.Option(help=option.help)],
            )
        )
    # the run's own options, each before the option named (None: last)
    own: list[tuple[str, Any, Any, str, str | None]] = [
        ("out", Path | None, None, "Results directory (default bench-results/<time>).", "warmup"),
        (
            "stop_at_saturation",
            bool,
            True,
            "Stop raising the load once output tok/s grows less than "
            "--saturation-gain over the best earlier level while p50 E2E grows at least that much.",
            "saturation_gain",
        ),
        ("live", bool, True, "Live progress display.", None),
    ]
    for name, kind, default, help, before in own:
        param = inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=Annotated[kind, typer.Option(help=help)],
        )
        at = next((i for i, p in enumerate(params) if p.name == before), len(params))
        params.insert(at, param)
    return params


def run(**given: Any) -> None:
    """Load-test one server at each level; write requests.jsonl, summary.json/.csv and report.html."""
    out, live, stop_at_saturation = given.pop("out"), given.pop("live"), given.pop("stop_at_saturation")
    try:
        cfg = BenchConfig.from_run_options(given)
        if not stop_at_saturation:
            cfg.saturation_gain = None
        cfg.validate()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    out_dir = out or _default_out()
    results = _with_progress(live, lambda p: run_benchmark(cfg, out_dir, p))
    _print_final(results, out_dir)
    if results.interrupted:
        raise typer.Exit(130)


_params = _run_parameters()
run.__signature__ = inspect.Signature(_params, return_annotation=None)  # type: ignore[attr-defined]
run.__annotations__ = {p.name: p.annotation for p in _params} | {"return": None}
app.command()(run)


def _with_progress(live: bool, fn: Any) -> BenchResults:
    if not live:
        from llmhost.bench.runner import NullProgress

        return fn(NullProgress())  # type: ignore[no-any-return]
    with LiveProgress(console) as progress:
        return fn(progress)  # type: ignore[no-any-return]


@app.command()
def sweep(
    spec_file: Annotated[Path, typer.Argument(help="sweep.yaml", exists=True, dir_okay=False)],
    out: Annotated[
        Path | None, typer.Option(help="Results directory (default bench-results/<time>).")
    ] = None,
    slo_ms_per_token: Annotated[float | None, typer.Option(help="SLO: p50 ms per token.")] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="SLO: p50 TTFT in ms.")] = None,
    at_concurrency: Annotated[
        float | None,
        typer.Option(help="Load at which 'most cost-effective' is chosen (default: highest common)."),
    ] = None,
    price_per_hour: Annotated[float | None, typer.Option(help="Override the file's price per hour.")] = None,
    goodput: Annotated[list[str] | None, typer.Option(help=GOODPUT_HELP + " Overrides the file's.")] = None,
    live: Annotated[bool, typer.Option(help="Live progress display.")] = True,
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Start each configuration of SPEC_FILE, measure every level, stop it; recommend one."""
    use_s3_endpoint(s3_endpoint_url)  # for `serve:` configurations of s3:// models: their servers inherit it
    try:
        spec = SweepSpec.load(spec_file)
    except Exception as exc:
        raise typer.BadParameter(f"{spec_file}: {exc}") from exc
    if slo_ms_per_token is not None:
        spec.slo_ms_per_token = slo_ms_per_token
    if slo_ttft_ms is not None:
        spec.slo_ttft_ms = slo_ttft_ms
    if at_concurrency is not None:
        spec.at_concurrency = at_concurrency
    if price_per_hour is not None:
        spec.price_per_hour = price_per_hour
    if goodput:
        try:
            spec.goodput = parse_goodput(goodput)
        except ValueError as exc:
            raise typer.BadParameter(f"--goodput: {exc}") from exc
    out_dir = out or _default_out()
    results = _with_progress(live, lambda p: run_sweep(spec, out_dir, p))
    _print_final(results, out_dir)
    if results.interrupted:
        raise typer.Exit(130)


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="Baseline results directory (or summary.json).", exists=True)],
    b: Annotated[Path, typer.Argument(help="Results directory to compare with it.", exists=True)],
) -> None:
    """Print B / A for each level both result directories measured."""
    ra, rb = load_results(a), load_results(b)
    if ra.format != rb.format:
        console.print(
            f"[yellow]A is {ra.format or 'unversioned'}, B is {rb.format or 'unversioned'}: in "
            "llmhost-bench/1 itl_s was the per-request TPOT (now tpot_s) and req/s counted failures.[/yellow]"
        )
    rows = compare_results(ra, rb)
    if not rows:
        console.print("[yellow]No level in common (match is by configuration name and level).[/yellow]")
        raise typer.Exit(1)
    t = Table(title=f"B / A   (A = {a}, B = {b})")
    for col in ("config", "level", "metric", "A", "B", "B / A"):
        t.add_column(col, justify="left" if col in ("config", "level", "metric") else "right")
    for row in rows:
        ratio = row.ratio
        t.add_row(
            row.config,
            row.level,
            row.metric,
            _num(row.a, ".4g"),
            _num(row.b, ".4g"),
            "–" if ratio is None else f"{ratio:.3f}",
        )
    console.print(t)
