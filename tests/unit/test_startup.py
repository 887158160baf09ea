"""llmhost.process.startup: the collector held off while a process starts, then on again with what was
built frozen out of its generations; releasing twice is harmless."""

from __future__ import annotations

import gc
import subprocess
import sys

from llmhost.process import startup


def test_hold_then_release_freezes_what_was_built() -> None:
    frozen_before = gc.get_freeze_count()
    try:
        startup.hold()
        assert not gc.isenabled()
        built = [[i] for i in range(1000)]  # long-lived objects made while starting
        startup.release()
        assert gc.isenabled() and gc.get_freeze_count() >= frozen_before + len(built)
        startup.release()
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        gc.enable()


def test_a_command_runs_with_the_collector_on() -> None:
    """`llmhost` holds the collector from its entry; a command imported lazily (`llmhost models`, here
    its help) releases it before it runs."""
    code = (
        "import gc, sys; from llmhost import cli; sys.argv = ['llmhost', 'models', '--help']\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\nprint(gc.isenabled())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True"
