"""Shared test plumbing: notebook runtimes recorded by tests/test_notebooks.py, printed after the run."""

from __future__ import annotations

import pytest

NOTEBOOK_RUNTIMES = pytest.StashKey[list[tuple[str, float, str]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[NOTEBOOK_RUNTIMES] = []


@pytest.fixture(scope="session")
def notebook_runtimes(pytestconfig: pytest.Config) -> list[tuple[str, float, str]]:
    """(notebook, seconds, status) for every notebook a test executed; shown in the terminal summary."""
    return pytestconfig.stash[NOTEBOOK_RUNTIMES]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    rows = config.stash.get(NOTEBOOK_RUNTIMES, [])
    if rows:
        terminalreporter.section("notebook runtimes (smoke profile)")
        for name, seconds, status in rows:
            terminalreporter.write_line(f"{name}: {seconds:.1f}s  {status}")
