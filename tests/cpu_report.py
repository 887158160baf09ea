"""`pytest --cpu-top N`: the N tests and files that cost the most CPU, at the end of the output.

On this project's 2-core host the suite is bound by CPU, not by waiting: `--durations` then ranks a test
by how long it waited for the cores as much as by what it did (a Ray test that sleeps while its cluster
settles shows minutes of wall time and seconds of CPU). What a test costs is the CPU time of its worker
and of every process below it (the servers, endpoints, clusters and clients it started, the ones that
ended included once their parent reaped them), from the start of its setup to the end of its teardown;
a fixture shared by several tests counts in the phase that started or stopped it. With pytest-xdist the
workers measure and the controller reports."""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from pathlib import Path

import pytest

CPU_PROPERTY = "cpu_s"  # the user property a phase's report carries its CPU seconds in
_LAST = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-top",
        type=int,
        default=0,
        metavar="N",
        help="report the N tests and files that used the most CPU (this process and its descendants)",
    )


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def tree_cpu_s() -> float:
    """CPU seconds of this process and of its live descendants, each with its reaped children.

    The tree is walked down from this process through each thread's /proc children list: asking psutil
    for the descendants reads every process's /proc entry to find their parents (a few hundred with a
    Ray cluster up): 1.4 ms a call against 0.17 with 69 processes on the host, and the report then cost
    16 CPU-s over the unit tests alone, more where more processes run."""
    total, stack = 0, [os.getpid()]
    while stack:
        pid = stack.pop()
        try:  # one that ended since its parent listed it: its time is its parent's once reaped
            stat = Path(f"/proc/{pid}/stat").read_text()
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        for task in tasks:
            with contextlib.suppress(OSError):
                stack += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    return total * _TICK_S


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> object:
    if item.config.getoption("cpu_top"):
        item.stash[_LAST] = tree_cpu_s()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> object:
    outcome = yield
    if _LAST in item.stash:
        now = tree_cpu_s()
        outcome.get_result().user_properties.append((CPU_PROPERTY, now - item.stash[_LAST]))
        item.stash[_LAST] = now


class CpuTally:
    """The controller's sums, from the reports (its own or the workers')."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.tests: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == CPU_PROPERTY:
                self.tests[report.nodeid] += float(value)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        files: defaultdict[str, float] = defaultdict(float)
        for nodeid, cpu in self.tests.items():
            files[nodeid.split("::")[0]] += cpu
        write = terminalreporter.write_line
        terminalreporter.section(f"most CPU: {self.top} tests and files")
        write(f"{sum(self.tests.values()):.0f} CPU-s in {len(self.tests)} tests")
        for nodeid, cpu in sorted(self.tests.items(), key=lambda kv: -kv[1])[: self.top]:
            write(f"{cpu:7.1f}s  {nodeid}")
        write("")
        for path, cpu in sorted(files.items(), key=lambda kv: -kv[1])[: self.top]:
            write(f"{cpu:7.1f}s  {path}")


def pytest_configure(config: pytest.Config) -> None:
    top = config.getoption("cpu_top")
    if top and not hasattr(config, "workerinput"):  # a pytest-xdist worker measures, never reports
        config.pluginmanager.register(CpuTally(top), "cpu-tally")
