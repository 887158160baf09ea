"""run_interruptible: SIGINT stops the coroutine and says so, whatever SIGINT disposition was inherited."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from llmhost.process.interrupt import run_interruptible

CHILD = """
import asyncio, sys
from llmhost.process.interrupt import run_interruptible

async def main():
    print("ready", flush=True)
    await asyncio.sleep(60)
    return "done"

calls = []
result, interrupted = run_interruptible(main(), lambda: calls.append(1))
print(result, interrupted, len(calls), flush=True)
"""


@pytest.mark.parametrize("inherited", [signal.SIG_IGN, signal.SIG_DFL], ids=["ignored", "default"])
def test_sigint_cancels_the_run_and_calls_back_once(inherited: signal.Handlers) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, inherited),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"  # printed by main(): the handler is in place
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert out.split() == ["None", "True", "1"]


def test_a_run_that_ends_normally_is_not_interrupted() -> None:
    async def main() -> int:
        return 7

    assert run_interruptible(main()) == (7, False)
