"""`pytest --cpu-top N`: the N tests and files that cost the most CPU, at the end of the output.

On this project's 2-core host the suite is bound by CPU, not by waiting: `--durations` then ranks a test
by how long it waited for the cores as much as by what it did (a Ray test that sleeps while its cluster
settles shows minutes of wall time and seconds of CPU). What a test costs is the CPU time of its worker
and of every process below it (the servers, endpoints, clusters and clients it started, the ones that
ended included once their parent reaped them), from the start of its setup to the end of its teardown;
a fixture shared by several tests counts in the phase that started or stopped it. With pytest-xdist the
workers measure and the controller reports."""

from __future__ import annotations

from collections import defaultdict

import psutil
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


def tree_cpu_s() -> float:
    """CPU seconds of this process and of its live descendants, each with its reaped children."""
    me = psutil.Process()
    try:
        procs = [me, *me.children(recursive=True)]
    except psutil.Error:
        procs = [me]
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # ended between the listing and the reading: its time is its parent's now
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


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
