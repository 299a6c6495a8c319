"""Shared test plumbing: temporary files kept in the project, and notebook runtimes recorded by
tests/test_notebooks.py, printed after the run."""

from __future__ import annotations

from pathlib import Path

import pytest

collect_ignore_glob = ["fixtures/*"]  # the runner's fixture notebooks are inputs of tests, not lessons for nbval

NOTEBOOK_RUNTIMES = pytest.StashKey[list[tuple[str, float, str]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[NOTEBOOK_RUNTIMES] = []
    if config.option.basetemp is None:
        # pytest's default is /tmp/pytest-of-<user>, kept after the run; the project's own folder instead (wiped at
        # the start of every run, removed by `make test` when the tests pass, listed in .gitignore)
        config.option.basetemp = str(Path(config.rootpath) / ".pytest_tmp")


@pytest.fixture(scope="session")
def notebook_runtimes(pytestconfig: pytest.Config) -> list[tuple[str, float, str]]:
    """(notebook, seconds, status) for every notebook a test executed; shown in the terminal summary."""
    return pytestconfig.stash[NOTEBOOK_RUNTIMES]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its rows to the controller, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["notebook_runtimes"] = list(session.config.stash[NOTEBOOK_RUNTIMES])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """(pytest-xdist's hook, run by the controller as each worker finishes)"""
    node.config.stash[NOTEBOOK_RUNTIMES].extend(tuple(row) for row in getattr(node, "workeroutput", {}).get(
        "notebook_runtimes", []))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    rows = config.stash.get(NOTEBOOK_RUNTIMES, [])
    if rows:
        terminalreporter.section("notebook runtimes (smoke profile)")
        for name, seconds, status in rows:
            terminalreporter.write_line(f"{name}: {seconds:.1f}s  {status}")
