"""The notebooks are the integration tests.

Every notebook under notebooks/, solutions/ and exercises/ runs once in the smoke profile:
- the lessons under nbval (`make test` passes `--nbval-lax ... notebooks`; the repository's conftest.py holds them to
  the smoke budgets); solutions and exercises here, through the papermill runner `make course` uses;
- solutions run without an error; exercises fail only with NotImplementedError (the stubs);
- the exercise contract, per (solution, exercise) pair: every check PASSes in the solution, FAILs in the
  exercise, and both run the same checks;
- every solution holds a decision lab: after its own cells the solution replays each wrong decision it records
  (`exercises.with_wrong_decisions`, in the same kernel), and that lab's check must FAIL on each;
- every notebook is stored clean (no outputs, null execution counts) with a `parameters` cell first.

Each notebook runs once per session (cached); runtimes are printed in the terminal summary.
The first tests below check the runner and the report on tiny fixture notebooks in tests/fixtures/.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from agentrl_lite.course.budgets import CELL_TIMEOUT_S, MEMORY_BUDGET_MB, allowed_seconds, smoke_budget_s
from agentrl_lite.course.cli import main
from agentrl_lite.course.exercises import (
    WRONG_TAG,
    cell_stdout,
    check_outcomes,
    is_check_cell,
    make_exercise,
    notebook_text,
    strip_outputs,
    with_wrong_decisions,
    wrong_decision_outcomes,
)
from agentrl_lite.course.runner import NotebookRun, execute_notebook

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
LESSON_DIRS = ("notebooks", "solutions", "exercises")
NOTEBOOKS = sorted(p.relative_to(REPO).as_posix() for d in LESSON_DIRS for p in (REPO / d).glob("*.ipynb"))
EXECUTED_HERE = [n for n in NOTEBOOKS if not n.startswith("notebooks/")]
"""the notebooks these tests execute; the lessons run under nbval in the same `make test`"""
PAIRS = sorted(p.name for p in (REPO / "solutions").glob("*.ipynb"))
SLACK = float(os.environ.get("AGENTRL_SMOKE_SLACK", "1.5"))
"""A smoke notebook must finish within its budget (`budgets.BUDGET_S`, on the reference machine: 2 idle cores) times this slack,
times how much slower this machine runs now (`budgets.machine_slowdown`, at most 3×: CI machines ran twice slower on
some days). Any single cell is stopped after twice the budget."""


class Executions:
    """Runs each notebook once per session in the smoke profile; later requests reuse the run."""

    def __init__(self, out_dir: Path, runtimes: list[tuple[str, float, str]]) -> None:
        self.out_dir, self.runtimes, self.runs = out_dir, runtimes, {}
        self.wrong: dict[str, dict[str, tuple[bool | None, str | None]]] = {}
        """solution → why → (outcome, error) of each wrong decision it replayed (`wrong_decision_outcomes`)"""

    def __call__(self, relpath: str) -> NotebookRun:
        if relpath not in self.runs:
            path = REPO / relpath
            if not path.exists():
                pytest.fail(f"{relpath} does not exist: run `agentrl-lite exercises`")
            replays, n_stored = [], 0
            if path.parent.name == "solutions":  # the solution, then its wrong decisions replayed in the same kernel
                solution = nbformat.read(path, as_version=4)
                n_stored = len(solution.cells)
                nb, replays = with_wrong_decisions(solution, relpath)
                if replays:
                    path = self.out_dir / "with_wrong_decisions" / relpath
                    path.parent.mkdir(parents=True, exist_ok=True)
                    nbformat.write(nb, path)
            run = execute_notebook(
                path,
                self.out_dir / relpath,
                profile="smoke",
                timeout_per_cell=CELL_TIMEOUT_S["smoke"],
                # exercises: run every cell, every check must fail; solutions: the replays of wrong decisions fail
                allow_errors=path.parent.name == "exercises" or bool(replays),
            )
            if replays:  # the run as the solution alone would read, and the replays' outcomes apart
                self.wrong[relpath] = wrong_decision_outcomes(run.notebook)
                kept = [c for c in run.notebook.cells if WRONG_TAG not in c.get("metadata", {}).get("tags", [])]
                run.errors = [e for e in run.errors if e.cell_index < n_stored]
                run.notebook.cells = kept
                run.path = REPO / relpath
                if run.errors:  # the solution itself failed: as without replays, the first error counts
                    run.errors = run.errors[:1]
            self.runs[relpath] = run
            stubs_only = run.errors and all(e.ename == "NotImplementedError" for e in run.errors)
            status = "stubs raise NotImplementedError" if stubs_only else run.status
            if run.peak_rss_mb and run.cell_peak_rss_mb:  # CI's kernels have read a few hundred MB above this machine's: print every peak
                status += f"; peak {run.peak_rss_mb:.0f} MB (heaviest cell {run.heaviest_cells()[0][0]})"
            status += "; slowest " + ", ".join(f"cell {i} {sec:.1f}s" for i, sec in run.slowest_cells(3))
            self.runtimes.append((relpath, run.seconds, status))
            print(f"{relpath}: {run.seconds:.1f}s")
        return self.runs[relpath]


@pytest.fixture(scope="session")
def executed(tmp_path_factory: pytest.TempPathFactory, notebook_runtimes: list) -> Executions:
    return Executions(tmp_path_factory.mktemp("executed"), notebook_runtimes)


def _errors(run: NotebookRun) -> str:
    return (
        "; ".join(f"cell {e.cell_index}: {e.ename}: {e.evalue}" for e in run.errors)
        + f" (executed copy: {run.out_path})"
    )


# --- the machinery, on fixtures ------------------------------------------------------------------------------


@pytest.mark.notebooks
def test_runner_solution_passes_and_generated_exercise_fails_only_on_the_stub(tmp_path: Path) -> None:
    solution = FIXTURES / "solutions" / "00_tiny.ipynb"
    run = execute_notebook(solution, tmp_path / "solution.ipynb", profile="smoke")
    assert run.status == "ok", _errors(run)
    assert cell_stdout(run.notebook.cells[1]) == "profile=smoke\n", "the kernel must see AGENTRL_PROFILE"
    assert check_outcomes(run.notebook) == {"add two numbers": True}

    exercise_path = tmp_path / "exercises" / "00_tiny.ipynb"
    exercise_path.parent.mkdir()
    exercise_path.write_text(notebook_text(make_exercise(solution)))
    run = execute_notebook(
        exercise_path, tmp_path / "out" / "exercise.ipynb", profile="smoke", allow_errors=True
    )
    assert run.status == "failed"
    assert [(e.cell_index, e.ename, e.check, e.stub) for e in run.errors] == [
        (4, "NotImplementedError", True, False)
    ]
    assert run.error == "NotImplementedError: Exercise: return the sum of a and b (cell 4)"
    assert check_outcomes(run.notebook) == {"add two numbers": False}
    assert cell_stdout(run.notebook.cells[-1]) == "after the check\n", "allow_errors must run every cell"


@pytest.mark.notebooks
def test_runner_stops_a_cell_that_runs_too_long(tmp_path: Path) -> None:
    params = new_code_cell(
        'import os\n\nPROFILE = os.environ.get("AGENTRL_PROFILE", "auto")', metadata={"tags": ["parameters"]}
    )
    nb = new_notebook(
        cells=[params, new_code_cell("import time\n\ntime.sleep(60)"), new_code_cell("print('late')")]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "slow.ipynb"
    path.write_text(notebook_text(nb))
    run = execute_notebook(path, tmp_path / "out.ipynb", profile="smoke", timeout_per_cell=3)
    assert run.seconds < 45
    assert [(e.cell_index, e.ename) for e in run.errors] == [(1, "CellTimeoutError")]
    assert run.slowest_cells(1)[0][0] == 1, "papermill's timings must point at the cell that was stopped"


@pytest.mark.notebooks
def test_a_kernels_temporary_files_are_removed_with_it(tmp_path: Path) -> None:
    """Whatever a notebook leaves in its temporary folder (multiprocessing's pymp-* folders when the kernel dies
    before its exit handlers, stashed weights) is gone when the run ends: nothing accumulates in /tmp."""
    import tempfile

    params = new_code_cell(
        'import os\n\nPROFILE = os.environ.get("AGENTRL_PROFILE", "auto")', metadata={"tags": ["parameters"]}
    )
    leave = new_code_cell("import tempfile\n\nleft = tempfile.mkdtemp(prefix='pymp-')\n"
                          "open(os.path.join(left, 'sock'), 'w').close()\nprint(left)")
    nb = new_notebook(cells=[params, leave])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "leaves.ipynb"
    path.write_text(notebook_text(nb))
    run = execute_notebook(path, tmp_path / "out.ipynb", profile="smoke")
    assert run.status == "ok"
    left = Path(cell_stdout(run.notebook.cells[1]).strip())
    assert left.name.startswith("pymp-") and left.parent.name.startswith("agentrl-kernel-")
    assert left.parent.parent == Path(tempfile.gettempdir())
    assert not left.parent.exists(), "the kernel's temporary folder must be removed after the run"


@pytest.mark.notebooks
def test_course_run_writes_report_plots_and_results_and_exits_nonzero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(
        "AGENTRL_RESULTS", str(tmp_path / "results")
    )  # keep the repository's results/ untouched
    monkeypatch.delenv("AGENTRL_COMMAND", raising=False)
    code = main(
        [
            "course",
            "--profile",
            "smoke",
            "--notebooks",
            str(FIXTURES / "course"),
            "--out",
            str(tmp_path / "runs"),
        ]
    )
    assert code == 1, "a failed notebook must make the command fail"
    captured = capfd.readouterr()  # file-descriptor level: the kernels' own stderr too
    assert "02_fails.ipynb" in captured.out
    assert "without encryption" not in captured.err, "kernels must talk over IPC, not warn about plain TCP"
    assert "AGENTRL_RUN_DIR" not in os.environ, "the runner must restore the environment"
    (run_dir,) = (tmp_path / "runs").iterdir()

    summary = json.loads((run_dir / "runs.json").read_text())
    assert [(n["notebook"], n["status"]) for n in summary["notebooks"]] == [
        ("01_ok.ipynb", "ok"),
        ("02_fails.ipynb", "failed"),
    ]
    assert all(n["peak_rss_mb"] > 20 for n in summary["notebooks"]), "a kernel's memory was not measured"
    heaviest = summary["notebooks"][0]["heaviest_cells"]
    assert heaviest[0]["cell"] == 4, f"the cell that held 600 MB must be named as the heaviest: {heaviest}"
    assert heaviest[0]["peak_rss_mb"] > summary["notebooks"][1]["peak_rss_mb"] + 450, heaviest
    failed = nbformat.read(run_dir / "02_fails.ipynb", as_version=4)
    assert failed.cells[-1].outputs == [], "execution must stop at the failing cell"

    record = json.loads((run_dir / "results" / "fixture_ok.json").read_text())
    assert record["profile"] == "smoke" and record["command"] == summary["command"]
    assert record["command"].startswith("agentrl-lite course --profile smoke")
    assert (tmp_path / "results" / "smoke" / "fixture_ok.json").exists()

    assert (run_dir / "plots" / "01_ok_0.png").read_bytes().startswith(b"\x89PNG")
    report = (run_dir / "report.md").read_text()
    assert "| [01_ok.ipynb](01_ok.ipynb) | ok |" in report
    assert (
        "| [02_fails.ipynb](02_fails.ipynb) | failed |" in report
        and "ValueError: fixture failure (cell 2)" in report
    )
    assert (
        "| accuracy | 0.75 |" in report and "| reward.mean | 1.5 |" in report and "| label | tiny |" in report
    )
    assert "curve" not in report, "lists are curves, not headline numbers"
    assert "![01_ok_0](plots/01_ok_0.png)" in report
    assert "01_ok.ipynb: cell 4 " in report, "the report names where the memory goes"
    assert "measures plumbing, not learning" in report.split("## Notebooks")[0], "smoke reports say so at the top"


# --- the real notebooks --------------------------------------------------------------------------------------


@pytest.mark.parametrize("relpath", NOTEBOOKS)
def test_notebook_is_stored_clean_with_a_parameters_cell(relpath: str) -> None:
    nb = nbformat.read(REPO / relpath, as_version=4)
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count is not None)
    ]
    assert not dirty, f"cells {dirty} have outputs or execution counts: run `agentrl-lite strip {relpath}`"
    assert not strip_outputs(REPO / relpath, dry_run=True), (  # else `strip --check` flags it and a diff shows noise
        f"{relpath} is not in nbformat's stored layout: run `agentrl-lite strip {relpath}`")
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", "the kernel must be python3"
    first_code = next((c for c in nb.cells if c.cell_type == "code"), None)
    assert first_code is not None, "a notebook without code"
    assert "parameters" in first_code.metadata.get("tags", []), (
        "the first code cell must be tagged `parameters`"
    )
    assert 'PROFILE = os.environ.get("AGENTRL_PROFILE", "auto")' in first_code.source
    ids = [c.get("id") for c in json.loads((REPO / relpath).read_text())["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), "every cell needs its own id (nbformat 4.5; else every run warns)"
    # papermill parses every assignment of the cell (else each run warns "Unable to parse line" and `--set` of that
    # name warns "Passed unknown parameter"); a comment holding "=" is what it cannot parse
    from papermill.translators import PythonTranslator

    assigned = [line.split("=", 1)[0].strip() for line in first_code.source.splitlines()
                if "=" in line and not line.startswith((" ", "#", "import"))]
    parsed = [p.name for p in PythonTranslator.inspect({"source": first_code.source})]
    assert parsed == assigned, f"papermill reads {parsed} of the parameters {assigned}: no '=' inside their comments"


@pytest.mark.notebooks
@pytest.mark.parametrize("relpath", EXECUTED_HERE)
def test_notebook_runs_in_the_smoke_profile(relpath: str, executed: Executions) -> None:
    run = executed(relpath)
    if relpath.startswith("exercises/"):
        unexpected = [e for e in run.errors if e.ename != "NotImplementedError"]
        assert not unexpected, f"an exercise may only fail on its stubs: {_errors(run)}"
    else:
        assert run.status == "ok", _errors(run)
    budget = smoke_budget_s()
    allowed, excuse = allowed_seconds(run.seconds, budget, SLACK)  # a slowdown measured now, right after the notebook
    assert run.seconds <= allowed, (
        f"{relpath} took {run.seconds:.0f} s; the smoke budget is {budget:.0f} s ({allowed:.0f} s with the slack and "
        f"{excuse}). Slowest cells: "
        + ", ".join(f"cell {i} {sec:.0f} s" for i, sec in run.slowest_cells())
    )
    # the laptop budget, as `make course PROFILE=smoke` applies it (runner.check_memory): CI fails where a newcomer's
    # first run would
    assert run.peak_rss_mb and run.peak_rss_mb <= MEMORY_BUDGET_MB["smoke"], (
        f"{relpath}: the kernel's peak memory {run.peak_rss_mb} MB is over the {MEMORY_BUDGET_MB['smoke']} MB budget. "
        "Heaviest cells: " + ", ".join(f"cell {i} {mb:.0f} MB" for i, mb in run.heaviest_cells())
    )


@pytest.mark.parametrize("name", PAIRS)
def test_one_check_per_cell(name: str) -> None:
    """In an exercise the first check of a cell raises on the stub and would hide the checks after it."""
    nb = nbformat.read(REPO / "solutions" / name, as_version=4)
    crowded = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and sum(line.startswith("check(") for line in c.source.splitlines()) > 1
    ]
    assert not crowded, f"solutions/{name}: cells {crowded} call check() more than once; split them"


@pytest.mark.notebooks
@pytest.mark.parametrize("name", PAIRS)
def test_checks_pass_on_the_solution_and_fail_on_the_exercise(name: str, executed: Executions) -> None:
    solution, exercise = executed(f"solutions/{name}"), executed(f"exercises/{name}")
    for run in (solution, exercise):
        silent = [
            i
            for i, c in enumerate(run.notebook.cells)
            if is_check_cell(c) and not check_outcomes(nbformat.v4.new_notebook(cells=[c]))
        ]
        assert not silent, f"{run.path.name}: check cells {silent} printed no PASS/FAIL line ({run.out_path})"
    passed, failed = check_outcomes(solution.notebook), check_outcomes(exercise.notebook)
    assert passed, f"solutions/{name} has no check cells"
    assert all(passed.values()), (
        f"checks failing on the solution: {sorted(k for k, v in passed.items() if not v)}"
    )
    assert set(failed) == set(passed), (
        f"the exercise ran other checks than the solution: only in solution {sorted(set(passed) - set(failed))}, "
        f"only in exercise {sorted(set(failed) - set(passed))} (one check() per cell)"
    )
    assert not any(failed.values()), (
        f"checks passing on the stub, so they test nothing: {sorted(k for k, v in failed.items() if v)}"
    )
    check_errors = {e.cell_index: e.ename for e in exercise.errors if e.check}
    assert set(check_errors.values()) == {"NotImplementedError"}, (
        f"exercise check cells must error on the stub: {_errors(exercise)}"
    )


@pytest.mark.notebooks
@pytest.mark.parametrize("name", PAIRS)
def test_the_decision_lab_fails_on_each_wrong_decision(name: str, executed: Executions) -> None:
    """Acceptance of a decision lab: its check refuses a plausible wrong decision, not only the stub."""
    run = executed(f"solutions/{name}")
    assert run.status == "ok", _errors(run)
    outcomes = executed.wrong.get(f"solutions/{name}", {})
    assert outcomes, (f"solutions/{name} records no wrong decision: its decision lab needs a '# BEGIN WRONG: <why>' "
                      "block inside a solution region (see agentrl_lite.course.exercises)")
    refused = {why: (outcome, error) for why, (outcome, error) in outcomes.items()
               if not (outcome is False and error == "AssertionError")}
    assert not refused, (
        f"the lab's check did not FAIL on these wrong decisions (outcome, error): {refused} ({run.out_path})")


@pytest.mark.notebooks
def test_nbval_collects_every_code_cell_of_every_lesson() -> None:
    """`make nbval` runs the lessons under nbval: each lesson is collected, one item per code cell."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                          "--collect-only", "notebooks/"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    items = [line.split("::")[0] for line in out.stdout.splitlines() if "::Cell " in line]
    lessons = sorted((REPO / "notebooks").glob("*.ipynb"))
    expected = {f"notebooks/{p.name}": sum(c["cell_type"] == "code" for c in json.loads(p.read_text())["cells"])
                for p in lessons}
    assert {name: items.count(name) for name in expected} == expected


@pytest.mark.notebooks
def test_a_notebook_over_its_memory_budget_fails_in_smoke_and_is_flagged_otherwise(tmp_path: Path) -> None:
    from agentrl_lite.course.runner import check_memory

    run = execute_notebook(FIXTURES / "course" / "01_ok.ipynb", tmp_path / "ok.ipynb", "smoke")
    assert run.status == "ok" and run.peak_rss_mb > 600  # the fixture holds 600 MB in cell 4
    assert check_memory(run, 64_000, fail=True).status == "ok", "within the budget: nothing changes"
    flagged = check_memory(run, 200, fail=False)
    assert flagged.status == "ok" and flagged.over_memory_mb == 200
    failed = check_memory(run, 200, fail=True)
    assert failed.status == "failed" and failed.errors[-1].ename == "MemoryBudgetExceeded"
    assert failed.errors[-1].cell_index == 4, "the error points at the heaviest cell"


@pytest.mark.notebooks
def test_a_kernels_memory_leaves_out_what_else_the_runner_started(tmp_path: Path) -> None:
    """Under pytest-xdist a worker keeps processes an earlier test started (lesson 10's forkserver): summing every
    descendant of the runner gave a 500 MB notebook a 996 MB peak. Only the kernel's own tree counts."""
    import subprocess
    import sys

    mb = 600
    bystander = subprocess.Popen(
        [sys.executable, "-c", f"import time\nblock = bytearray(b'x' * ({mb} << 20))\nprint('ready', flush=True)\n"
                               "time.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert bystander.stdout.readline().strip() == "ready"
        notebook = tmp_path / "small.ipynb"
        nbformat.write(new_notebook(cells=[new_code_cell("import time\ntime.sleep(1.0)")]),
                       str(notebook))
        run = execute_notebook(notebook, tmp_path / "small_out.ipynb", "smoke")
    finally:
        bystander.kill()
        bystander.wait()
    assert run.status == "ok" and 20 < run.peak_rss_mb < mb, f"peak {run.peak_rss_mb} MB: the bystander counted"

def test_pages_a_forked_child_shares_with_its_parent_count_once_in_a_kernels_memory(monkeypatch) -> None:
    """Lesson 10 runs candidate kernels in children forked from a forkserver that preloads PyTorch: summing each
    process's RSS counted the shared pages once per child (its cpu peak read 6.9 GB). The kernel itself is read
    by RSS: its PSS costs a page-table walk (66 ms for a 3.6 GB kernel) four times a second."""
    import subprocess
    import sys
    import time

    import psutil

    from agentrl_lite.course import memory

    if not Path("/proc/self/smaps_rollup").exists():
        pytest.skip("no PSS on this system: the runner falls back to RSS")
    with memory.peak_memory() as before:  # whatever earlier tests left running (a forkserver): not this test's
        time.sleep(0.6)
    mb = 300
    forking = (f"import os, sys, time\nblock = bytearray(b'x' * ({mb} << 20))\n"
               "pid = os.fork()\nprint('ready', flush=True) if pid else None\ntime.sleep(30)\n")
    # a kernel (small) that starts a process of its own (a forkserver: a fresh interpreter) that forks a child
    kernel = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {forking!r}])\n"
    parent = subprocess.Popen([sys.executable, "-c", kernel], stdout=subprocess.PIPE, text=True)
    read_by_pss = []
    real = memory.resident_bytes
    monkeypatch.setattr(memory, "resident_bytes", lambda p: read_by_pss.append(p.pid) or real(p))
    try:
        assert parent.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        tree = [psutil.Process(parent.pid), *psutil.Process(parent.pid).children(recursive=True)]
        assert len(tree) == 3
        assert sum(p.memory_info().rss for p in tree) / 2**20 > 2 * mb, "two map the block: an RSS sum counts it twice"
        with memory.peak_memory() as peak:
            time.sleep(0.6)
        assert mb < peak[0] - before[0] < 1.3 * mb, f"the block once: {peak[0] - before[0]:.0f} MB"
        assert {p.pid for p in tree[1:]} <= set(read_by_pss) and parent.pid not in read_by_pss, (
            "PSS for what the kernel starts, RSS for the kernel")
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()


def test_the_smoke_budget_stretches_by_the_measured_slowdown_within_bounds(monkeypatch) -> None:
    """A busy machine gets a longer budget, by its speed on a fixed workload against the reference's; never less than
    the budget, never more than three budgets, and the budget itself when the reference was never measured."""
    from agentrl_lite.course import budgets

    reference = {"metrics": {"reference_workload_s": 2.0}}
    monkeypatch.setattr(budgets, "read_results", lambda name: reference if name == "bench_smoke_reference" else None)
    for measured, expected in ((3.0, 1.5), (1.0, 1.0), (20.0, 3.0)):
        times = iter([measured + 0.5, measured, measured + 1.0])  # the best of three counts
        monkeypatch.setattr(budgets, "reference_workload", lambda times=times: next(times))
        assert budgets.machine_slowdown() == pytest.approx(expected)
    monkeypatch.setattr(budgets, "read_results", lambda name: None)
    assert budgets.machine_slowdown() == 1.0
    assert (REPO / "results" / "bench" / "bench_smoke_reference.json").exists(), "the reference is committed"


def test_the_slowdown_is_measured_only_for_an_overrun_it_could_excuse(monkeypatch) -> None:
    """Within budget × slack nothing is measured; up to three times over, the measured slowdown stretches it; beyond,
    no slowdown could (at most `MAX_SLOWDOWN`), so the seconds of measuring it are not spent."""
    from agentrl_lite.course import budgets

    calls = []
    monkeypatch.setattr(budgets, "machine_slowdown", lambda: calls.append(1) or 2.0)
    assert budgets.allowed_seconds(80, 60, 1.5) == (90, "no slowdown needed") and not calls
    assert budgets.allowed_seconds(200, 60, 1.5) == (180, "this machine's slowdown 2.00×") and len(calls) == 1
    assert budgets.allowed_seconds(300, 60, 1.5) == (90, "no slowdown excuses over 3×") and len(calls) == 1


def test_the_smoke_budget_is_longer_where_bf16_is_slow(monkeypatch) -> None:
    """60 s where bf16 is fast; 25/15 of it where every bf16 choice runs in fp32 (the suite's own two limits)."""
    from agentrl_lite import models
    from agentrl_lite.course import budgets

    monkeypatch.setattr(models, "bf16_is_fast", lambda: True)
    assert budgets.smoke_budget_s() == budgets.BUDGET_S["smoke"] == 60
    monkeypatch.setattr(models, "bf16_is_fast", lambda: False)
    assert budgets.smoke_budget_s() == pytest.approx(100.0)


@pytest.mark.notebooks
def test_a_lesson_under_nbval_fails_over_its_budget_and_passes_within_it(tmp_path: Path) -> None:
    """The repository's conftest.py holds each notebook nbval runs to the smoke budget: a fixture notebook fails,
    naming its slowest cells, when the slack shrinks the budget to nothing, and every cell before the last passes.
    (Passing within the real budget is what every lesson does in `make test`, under the same conftest.)"""
    import shutil
    import subprocess
    import sys

    shutil.copy(FIXTURES / "solutions" / "00_tiny.ipynb", tmp_path / "00_tiny.ipynb")

    def nbval(slack: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "AGENTRL_SMOKE_SLACK": slack, "PYTHONPATH": str(REPO)}
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
                               "--rootdir", str(tmp_path), "--nbval-lax", "--nbval-kernel-name", "python3",
                               str(tmp_path / "00_tiny.ipynb")], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    over = nbval("0.00001")
    assert over.returncode == 1, over.stdout[-3000:]
    assert "lessons under nbval (smoke profile)" in over.stdout, over.stdout[-3000:]
    assert "00_tiny.ipynb took" in over.stdout and "Slowest cells: Cell" in over.stdout, over.stdout[-3000:]
    assert re.search(r"\b1 failed, \d+ passed", over.stdout), "only the last cell carries the budget verdict"
