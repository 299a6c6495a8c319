"""The lessons under nbval (`pytest --nbval-lax notebooks/`, as `make test` and `make nbval` run them).

nbval runs each code cell of a notebook as one test item in one kernel. This file gives those kernels the smoke
profile (nbval cannot pass parameters, hence the environment variable) and a temporary folder of their own, and
holds each lesson to the smoke budgets the papermill runner applies: its wall time (kernel start included) and
the peak memory of its kernel. A lesson over either fails on its last cell, naming the slowest or heaviest cells.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

NBVAL_PROFILE = os.environ.get("AGENTRL_NBVAL_PROFILE", "smoke")
"""the profile the nbval kernels run in (AGENTRL_PROFILE is set for them when the first notebook starts)"""
SLACK = float(os.environ.get("AGENTRL_SMOKE_SLACK", "1.5"))
"""a lesson may take its budget times this slack times the machine's measured slowdown (`budgets.machine_slowdown`)"""


class LessonClock:
    """Wall time, cell times and peak kernel memory of each notebook nbval runs."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.cells: dict[str, list[tuple[str, float, float]]] = {}
        self.last_item: dict[str, str] = {}


CLOCK = pytest.StashKey[LessonClock]()


def _is_nbval(item: pytest.Item) -> bool:
    return type(item).__name__ == "IPyNbCell"


def pytest_configure(config: pytest.Config) -> None:
    config.stash[CLOCK] = LessonClock()
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers and "OMP_NUM_THREADS" not in os.environ:
        # `make test` runs two pytest-xdist workers: each (and every kernel or child it starts, which inherit the
        # variable) gets its share of the cores, or two torch thread pools fight over the same ones (5-9x slower)
        threads = max(1, len(os.sched_getaffinity(0)) // int(workers))
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import sys
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its notebooks' cell times to the controller, which prints the summary."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["nbval_cells"] = dict(session.config.stash[CLOCK].cells)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """(pytest-xdist's hook, run by the controller as each worker finishes)"""
    node.config.stash[CLOCK].cells.update(getattr(node, "workeroutput", {}).get("nbval_cells", {}))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    clock = config.stash[CLOCK]
    for item in items:
        if _is_nbval(item):
            clock.last_item[str(item.path)] = item.nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _is_nbval(item):
        return
    clock = item.config.stash[CLOCK]
    if not clock.started:  # the first notebook: every kernel nbval starts from now on inherits these
        os.environ["AGENTRL_PROFILE"] = NBVAL_PROFILE
        basetemp = item.config.option.basetemp
        if basetemp:  # pytest creates --basetemp only when a test asks for tmp_path: a lessons-only run has none yet
            Path(basetemp).mkdir(parents=True, exist_ok=True)
        os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="nbval-kernels-", dir=basetemp or None)
    clock.started.setdefault(str(item.path), time.perf_counter())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if not _is_nbval(item):
        return (yield)
    from agentrl_lite.course.memory import peak_memory

    start = time.perf_counter()
    with peak_memory() as peak:
        try:
            return (yield)
        finally:
            seconds = time.perf_counter() - start
            item.config.stash[CLOCK].cells.setdefault(str(item.path), []).append((item.name, seconds, peak[0]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    clock = item.config.stash[CLOCK]
    if not _is_nbval(item) or call.when != "call" or report.failed or clock.last_item.get(str(item.path)) != item.nodeid:
        return report
    problem = _over_budget(str(item.path), clock)
    if problem:
        report.outcome, report.longrepr = "failed", problem
    return report


def _over_budget(path: str, clock: LessonClock) -> str | None:
    from agentrl_lite.course import budgets

    seconds = time.perf_counter() - clock.started[path]
    cells = clock.cells.get(path, [])
    peak = max((mb for _, _, mb in cells), default=0.0)
    name = Path(path).name
    clock.cells[path] = cells + [("total", seconds, peak)]
    budget = budgets.smoke_budget_s() if NBVAL_PROFILE == "smoke" else budgets.BUDGET_S[NBVAL_PROFILE]
    allowed, excuse = budgets.allowed_seconds(seconds, budget, SLACK)
    if seconds > allowed:
        slowest = sorted(cells, key=lambda c: -c[1])[:3]
        return (f"{name} took {seconds:.0f} s under nbval; the {NBVAL_PROFILE} budget is {budget:.0f} s "
                f"({allowed:.0f} s with the slack {SLACK} and {excuse}). Slowest cells: "
                + ", ".join(f"{cell} {s:.0f} s" for cell, s, _ in slowest))
    budget = budgets.MEMORY_BUDGET_MB.get(NBVAL_PROFILE)
    if budget and peak > budget:
        heaviest = sorted(cells, key=lambda c: -c[2])[:3]
        return (f"{name}: the kernel's peak memory {peak:.0f} MB is over the {budget} MB budget. Heaviest cells: "
                + ", ".join(f"{cell} {mb:.0f} MB" for cell, _, mb in heaviest))
    return None


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    clock = config.stash.get(CLOCK, None)
    if clock and clock.cells:
        terminalreporter.section(f"lessons under nbval ({NBVAL_PROFILE} profile)")
        for path, cells in clock.cells.items():
            total = [c for c in cells if c[0] == "total"]
            seconds = total[0][1] if total else sum(s for _, s, _ in cells)
            peak = max(mb for _, _, mb in cells)
            slowest = sorted((c for c in cells if c[0] != "total"), key=lambda c: -c[1])[:3]
            terminalreporter.write_line(f"notebooks/{Path(path).name}: {seconds:.1f}s  nbval; peak {peak:.0f} MB; "
                                        "slowest " + ", ".join(f"{cell} {s:.1f}s" for cell, s, _ in slowest))
