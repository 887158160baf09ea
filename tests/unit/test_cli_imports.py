"""`llmhost` imports a command's modules only when that command runs: every endpoint copy is an
`llmhost serve` process, and bench's aiohttp and numpy, the endpoint and the tuner cost it ~1.3 s of CPU
at each start (`python -X importtime`)."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

import llmhost.cli

OTHER_COMMANDS = ["llmhost.bench", "llmhost.endpoint", "llmhost.optimize", "llmhost.tune", "aiohttp"]


def loaded_after(*args: str) -> set[str]:
    """The other commands' modules loaded once `llmhost ARGS` ran (none: only the import)."""
    run = f"\ntry:\n    llmhost.cli.app({list(args)!r})\nexcept SystemExit:\n    pass" if args else ""
    report = f"print('loaded:', *(m for m in {OTHER_COMMANDS!r} if m in sys.modules))"
    probe = f"import sys\nimport llmhost.cli{run}\n{report}"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.splitlines()[-1].split()[1:])


def test_the_cli_and_serve_import_no_other_command() -> None:
    assert loaded_after() == set()
    assert loaded_after("serve", "--help") == set()


def test_a_command_loads_when_called_or_listed() -> None:
    assert "llmhost.bench" in loaded_after("bench", "--help")
    listed = CliRunner().invoke(llmhost.cli.app, ["--help"])
    assert listed.exit_code == 0
    for name in ("serve", "bench", "endpoint", "optimize", "tune"):
        assert f" {name} " in listed.stdout
    tune_help = CliRunner().invoke(llmhost.cli.app, ["tune", "--help"])
    assert tune_help.exit_code == 0 and "--slo-ttft-ms" in tune_help.stdout
    assert "guides/tune.md" in tune_help.stdout
    bench_run = CliRunner().invoke(llmhost.cli.app, ["bench", "run", "--help"])
    assert bench_run.exit_code == 0 and "guides/bench.md" in bench_run.stdout
