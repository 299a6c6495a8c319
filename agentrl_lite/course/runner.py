"""The notebook runner (course tooling): execute one notebook with papermill in a fresh kernel and record what
went wrong, cell by cell, with its runtime and memory.

`execute_notebook` runs a notebook in a fresh `python3` kernel, in the notebook's own folder (so relative paths
such as `../data` behave as in JupyterLab), with `AGENTRL_PROFILE` set. Whole-course runs (`run_course`, reports,
the runtime records) are in `course.course_runs`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import papermill
from papermill.exceptions import PapermillExecutionError
from papermill.execute import ERROR_MARKER_TAG

import agentrl_lite
from agentrl_lite.course.exercises import is_check_cell, is_stub_cell
from agentrl_lite.course.memory import RSS_EVERY_S, peak_memory

KERNEL = "python3"


def _ipc_kernel_manager(pids: list[int]) -> type:
    """A kernel manager whose kernel talks over local IPC sockets (files in Jupyter's runtime folder) instead of
    TCP ports: nothing listens on the network, so ipykernel has nothing to warn about (it warns, once per
    notebook, that TCP without encryption can be eavesdropped). It appends each kernel's process id to `pids`,
    so the memory of that kernel, and of nothing else, is measured."""
    import uuid

    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.paths import jupyter_runtime_dir

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs: Any) -> None:
            Path(jupyter_runtime_dir()).mkdir(parents=True, exist_ok=True)
            ip = os.path.join(jupyter_runtime_dir(), f"agentrl-{uuid.uuid4().hex[:12]}")
            super().__init__(transport="ipc", ip=ip, **kwargs)

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            await super()._async_launch_kernel(kernel_cmd, **kw)
            pids.append(self.provisioner.pid)

    return IPCKernelManager


PACKAGE_ROOT = Path(agentrl_lite.__file__).resolve().parent.parent
"""The folder holding the `agentrl_lite` package this runner imported; kernels import the same one."""


@dataclass
class CellError:
    """One error a cell raised while a notebook ran."""

    cell_index: int
    """index in the notebook as stored (markdown cells count; papermill's error banner cells do not)"""
    ename: str
    """exception class name, e.g. NotImplementedError; CellTimeoutError / DeadKernelError when execution stopped"""
    evalue: str
    """the exception message"""
    stub: bool
    """the cell holds a generated `raise NotImplementedError("Exercise: ...")` stub"""
    check: bool
    """the cell is a check cell (calls `check(`)"""


@dataclass
class NotebookRun:
    """What happened when one notebook ran."""

    path: Path
    """the notebook that ran"""
    out_path: Path
    """the executed copy, with outputs"""
    profile: str
    """the profile it ran under (AGENTRL_PROFILE)"""
    seconds: float
    """wall time including kernel start-up"""
    errors: list[CellError]
    """every error, in cell order (only the first one unless allow_errors)"""
    notebook: nbformat.NotebookNode = field(repr=False)
    """the executed notebook, read back from out_path"""
    peak_rss_mb: float | None = None
    """the most memory the kernel's process tree held at once (resident set, summed over its processes,
    sampled every `RSS_EVERY_S`); None where it could not be read"""
    over_memory_mb: float | None = None
    """the memory budget this run exceeded (`check_memory`), None when within it or unchecked"""
    cell_peak_rss_mb: dict[int, float] = field(default_factory=dict)
    """cell index (as stored) → the most memory the kernel held while that cell ran, from the same samples and
    papermill's cell start and end times"""

    @property
    def status(self) -> str:
        """`ok` when no cell raised, else `failed`."""
        return "failed" if self.errors else "ok"

    def slowest_cells(self, n: int = 3) -> list[tuple[int, float]]:
        """(cell index, seconds) of the n slowest cells, from papermill's per-cell timings."""
        timings = [
            (i, cell.get("metadata", {}).get("papermill", {}).get("duration") or 0.0)
            for i, cell in enumerate(_stored_cells(self.notebook))
        ]
        return sorted(timings, key=lambda t: -t[1])[:n]

    def heaviest_cells(self, n: int = 3) -> list[tuple[int, float]]:
        """(cell index, peak MB) of the n cells during which the kernel held the most memory."""
        return sorted(self.cell_peak_rss_mb.items(), key=lambda t: -t[1])[:n]

    @property
    def error(self) -> str | None:
        """`<ename>: <evalue> (cell <i>)` of the first failing cell, None when it ran clean."""
        if not self.errors:
            return None
        first = self.errors[0]
        return f"{first.ename}: {first.evalue} (cell {first.cell_index})"


@contextlib.contextmanager
def _environ(updates: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of the block (kernels inherit this process's environment)."""
    saved = {key: os.environ.get(key) for key in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _stored_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The executed notebook's cells without the banner cells papermill inserts on error, so indices match
    the stored notebook."""
    return [cell for cell in nb.cells if ERROR_MARKER_TAG not in cell.get("metadata", {}).get("tags", [])]


def _cell_errors(nb: nbformat.NotebookNode) -> list[CellError]:
    errors = []
    for index, cell in enumerate(_stored_cells(nb)):
        for out in cell.get("outputs", []):
            if out.output_type != "error":
                continue
            if out.ename == "SystemExit" and out.evalue in ("", "0"):
                continue  # sys.exit(0) ends a notebook early on purpose
            errors.append(CellError(index, out.ename, out.evalue, is_stub_cell(cell), is_check_cell(cell)))
    return errors


def _last_started_cell(nb: nbformat.NotebookNode) -> int:
    """The cell running when execution stopped without an error output (timeout, dead kernel)."""
    started = [
        i
        for i, cell in enumerate(_stored_cells(nb))
        if cell.get("metadata", {}).get("papermill", {}).get("start_time")
    ]
    return started[-1] if started else -1


def execute_notebook(
    path: str | Path,
    out_path: str | Path,
    profile: str,
    timeout_per_cell: int | None = 1800,
    allow_errors: bool = False,
    env: dict[str, str] | None = None,
    parameters: dict[str, object] | None = None,
) -> NotebookRun:
    """Run a notebook top to bottom in a fresh kernel and write the executed copy to `out_path`.

    The kernel sees `AGENTRL_PROFILE=<profile>`, this package on PYTHONPATH, a TMPDIR of its own (deleted
    afterwards), and `env`. It runs in the notebook's own folder. Execution stops at the first failing cell
    unless `allow_errors` (then every cell runs and every error is recorded, which is how exercise notebooks
    are checked). A cell running longer
    than `timeout_per_cell` seconds stops the notebook with a CellTimeoutError. `parameters` replace the
    values of the notebook's cell tagged "parameters" (papermill), e.g. {"SEED": 1}.
    """
    path, out_path = Path(path).resolve(), Path(out_path).resolve()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.exists():
        out_path.unlink()  # never mistake an older executed copy for this run's
    pythonpath = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    stopped: Exception | None = None
    start = time.perf_counter()
    samples: list[tuple[float, float]] = []
    kernel_pids: list[int] = []
    # the kernel's temporary files (multiprocessing's pymp-* folders, stashed weights) go to a folder of this run,
    # removed when the notebook ends even if the kernel was killed before its own clean-up ran
    with tempfile.TemporaryDirectory(prefix="agentrl-kernel-", ignore_cleanup_errors=True) as scratch, \
            _environ({"AGENTRL_PROFILE": profile, "PYTHONPATH": pythonpath, "TMPDIR": scratch, **(env or {})}), \
            peak_memory(samples, roots=lambda: kernel_pids) as peak:
        try:
            papermill.execute_notebook(
                str(path),
                str(out_path),
                kernel_name=KERNEL,
                cwd=str(path.parent),
                progress_bar=False,
                execution_timeout=timeout_per_cell,
                allow_errors=allow_errors,
                parameters=parameters or {},
                kernel_manager_class=_ipc_kernel_manager(kernel_pids),
            )
        except PapermillExecutionError:
            pass  # the failing cells carry error outputs in the executed copy; read below
        except Exception as exc:  # timeout, dead kernel, kernel that never started: no error output anywhere
            stopped = exc
    seconds = time.perf_counter() - start
    executed = nbformat.read(str(out_path if out_path.exists() else path), as_version=nbformat.NO_CONVERT)
    errors = _cell_errors(executed)
    if stopped is not None:
        index = _last_started_cell(executed)
        cell = _stored_cells(executed)[index] if index >= 0 else nbformat.v4.new_markdown_cell()
        message = str(stopped).strip().splitlines()
        # the stopped cell may also show the KeyboardInterrupt of the kernel's shutdown: the stop is the error
        errors = [e for e in errors if e.cell_index != index]
        errors.append(
            CellError(
                index,
                type(stopped).__name__,
                message[0] if message else "",
                is_stub_cell(cell),
                is_check_cell(cell),
            )
        )
        errors.sort(key=lambda e: e.cell_index)
    return NotebookRun(path, out_path, profile, seconds, errors, executed, round(peak[0], 1) or None,
                       cell_peak_rss_mb=_cell_peaks(executed, samples))


def check_memory(run: NotebookRun, budget_mb: float | None, fail: bool) -> NotebookRun:
    """Flag a run whose kernel's peak memory exceeded `budget_mb`: with `fail`, as an error on the heaviest cell
    (the notebook's status becomes failed); otherwise the report's memory column says so. Returns `run`."""
    if budget_mb is None or not run.peak_rss_mb or run.peak_rss_mb <= budget_mb:
        return run
    run.over_memory_mb = budget_mb
    if fail:
        cell = run.heaviest_cells(1)[0][0] if run.cell_peak_rss_mb else -1
        run.errors.append(CellError(cell, "MemoryBudgetExceeded",
                                    f"peak {run.peak_rss_mb:.0f} MB > {budget_mb:.0f} MB", False, False))
        run.errors.sort(key=lambda e: e.cell_index)
    return run


def _cell_peaks(nb: nbformat.NotebookNode, samples: list[tuple[float, float]]) -> dict[int, float]:
    """cell index → peak MB among the samples taken between the cell's papermill start and end times."""
    from datetime import datetime

    windows = []
    for index, cell in enumerate(_stored_cells(nb)):
        meta = cell.get("metadata", {}).get("papermill", {})
        if meta.get("start_time") and meta.get("end_time"):
            windows.append((index, *(datetime.fromisoformat(meta[k].replace("Z", "+00:00")).timestamp()
                                     for k in ("start_time", "end_time"))))
    out = {}
    for position, (index, lo, hi) in enumerate(windows):
        # one sampling interval of grace after the cell ends (a short cell may hold no sample), but never into the
        # next cell: its memory is that cell's, and a fast cell before a heavy one must not share its peak
        until = hi + RSS_EVERY_S if position + 1 == len(windows) else min(hi + RSS_EVERY_S, windows[position + 1][1])
        inside = [mb for t, mb in samples if lo <= t < until]
        if inside:
            out[index] = round(max(inside), 1)
    return out
