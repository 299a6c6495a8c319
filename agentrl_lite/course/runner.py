"""The notebook runner (course tooling): execute notebooks with papermill, and run the whole course into
`runs/<timestamp>/` with a report.

`execute_notebook` runs one notebook in a fresh `python3` kernel, in the notebook's own folder (so relative
paths such as `../data` behave as in JupyterLab), with `AGENTRL_PROFILE` set, and records what went wrong
cell by cell. `run_course` runs every lesson in order and writes, under `runs/<UTC timestamp>/`:
the executed notebooks, `plots/<notebook>_<i>.png` (every PNG a notebook displayed), `results/*.json`
(copies of the results files the lessons wrote, see `course.results.write_results`), `runs.json` (status per
notebook, for machines) and `report.md` (status and runtime per notebook, headline numbers, plots).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import fnmatch
import functools
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import papermill
from papermill.exceptions import PapermillExecutionError
from papermill.execute import ERROR_MARKER_TAG
from tqdm.auto import tqdm

import agentrl_lite
from agentrl_lite.course.exercises import is_check_cell, is_stub_cell
from agentrl_lite.course.profiles import resolve_profile
from agentrl_lite.course.results import device_name, read_results, write_results

KERNEL = "python3"


_RSS_EVERY_S = 0.25


def _resident_bytes(process: Any) -> int:
    """The memory `process` holds: its proportional set size (PSS) where Linux reports it, else its RSS.

    PSS splits each page among the processes that share it, so a process tree's sum counts a page once. A sum
    of RSS counts it in every process: lesson 10's candidate kernels run in children forked from a forkserver
    that preloads PyTorch, and each child's RSS repeats the pages it shares with the forkserver."""
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{process.pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    return process.memory_info().rss


@contextlib.contextmanager
def _peak_rss(samples: list[tuple[float, float]] | None = None) -> Iterator[list[float]]:
    """Sample the resident memory of this process's descendants (the kernel's RSS and the PSS of whatever it
    starts, so pages they share with each other count once: `_resident_bytes`) in a thread
    while the block runs; yields a one-element list that holds the peak in MB afterwards (0 if never read).
    `samples`, when given, receives every reading as (unix time, MB), so memory can be attributed to cells."""
    import threading

    import psutil

    peak, stop = [0.0], threading.Event()

    def sample() -> None:
        me = psutil.Process()
        while not stop.is_set():
            total = 0
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    # the kernel's own pages by RSS: reading PSS walks a process's page tables (66 ms for a 3.6 GB
                    # kernel, a quarter of a core at four reads a second); what it starts is small and cheap to read
                    total += child.memory_info().rss if child.ppid() == me.pid else _resident_bytes(child)
            peak[0] = max(peak[0], total / 2**20)
            if samples is not None:
                samples.append((time.time(), total / 2**20))
            stop.wait(_RSS_EVERY_S)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


@functools.cache
def _ipc_kernel_manager() -> type:
    """A kernel manager whose kernel talks over local IPC sockets (files in Jupyter's runtime folder) instead of
    TCP ports: nothing listens on the network, so ipykernel has nothing to warn about (it warns, once per
    notebook, that TCP without encryption can be eavesdropped)."""
    import uuid

    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.paths import jupyter_runtime_dir

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs: Any) -> None:
            Path(jupyter_runtime_dir()).mkdir(parents=True, exist_ok=True)
            ip = os.path.join(jupyter_runtime_dir(), f"agentrl-{uuid.uuid4().hex[:12]}")
            super().__init__(transport="ipc", ip=ip, **kwargs)

    return IPCKernelManager
BUDGET_S = {"smoke": 150, "cpu": 20 * 60, "gpu": 30 * 60}
"""Stated wall-clock budget per notebook and profile (the README's profile table); the report flags notebooks above it."""
CELL_TIMEOUT_S = {"smoke": 2 * BUDGET_S["smoke"], "cpu": 4 * BUDGET_S["cpu"], "gpu": 2 * BUDGET_S["gpu"]}
"""A cell that runs longer is stopped with a CellTimeoutError: a guard against a hung cell, not the budget (the
report flags a slow notebook; it does not stop one). The cpu profile's guard is four budgets: on a CPU without bf16
instructions lesson 05's training cell, two GRPO runs and their evaluations, ran past two
(docs/design/05_rl_for_tool_calls.md)"""
MEMORY_BUDGET_MB = {"smoke": 4096, "cpu": 4096}
"""Peak resident memory a notebook's kernel may use (a student laptop's share); the report flags notebooks above
it, and in the smoke profile (CI) a notebook above it fails with MemoryBudgetExceeded"""


def reference_workload() -> float:
    """Seconds this machine takes now for a fixed piece of the course's kind of work: SmolLM2-135M's matrix shapes
    (width 576, MLP 1536, 3 key-value heads' width), one layer's weights run 30 times, over 2 × 128 tokens and then
    16 one-token steps of 4 rows, fp32, torch's default threads. No model files; the same arithmetic on every
    machine."""
    import torch

    gen = torch.Generator().manual_seed(0)
    width, hidden, kv = 576, 1536, 192
    layer = [torch.randn(*shape, generator=gen) / shape[0] ** 0.5
             for shape in ((width, width), (width, kv), (width, kv), (width, width),
                           (width, hidden), (width, hidden), (hidden, width))]

    def forward(x: torch.Tensor) -> torch.Tensor:
        for _ in range(30):
            q, k, v = x @ layer[0], x @ layer[1], x @ layer[2]
            attn = torch.softmax(q[..., :kv] @ k.transpose(-1, -2) / 8.0, dim=-1) @ v
            x = x + torch.cat([attn] * 3, dim=-1) @ layer[3]
            x = x + (torch.nn.functional.silu(x @ layer[4]) * (x @ layer[5])) @ layer[6]
            x = x / x.norm(dim=-1, keepdim=True)
        return x

    start = time.perf_counter()
    with torch.no_grad():
        forward(torch.randn(2, 128, width, generator=gen))
        for _ in range(16):
            forward(torch.randn(4, 1, width, generator=gen))
    return time.perf_counter() - start


def machine_slowdown(repeats: int = 3) -> float:
    """How many times slower than the machine the smoke budget was set on this one runs now: `reference_workload`'s
    best of `repeats` over the reference's (results/bench/bench_smoke_reference.json), at least 1 and at most 3. A busy CI
    machine stretches a notebook's smoke budget by it; no slowdown excuses more than a threefold overrun, and 1 when
    the reference was never measured."""
    record = read_results("bench_smoke_reference")
    if record is None:
        return 1.0
    best = min(reference_workload() for _ in range(repeats))
    return min(3.0, max(1.0, best / record["metrics"]["reference_workload_s"]))


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
    sampled every `_RSS_EVERY_S`); None where it could not be read"""
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
    # the kernel's temporary files (multiprocessing's pymp-* folders, stashed weights) go to a folder of this run,
    # removed when the notebook ends even if the kernel was killed before its own clean-up ran
    with tempfile.TemporaryDirectory(prefix="agentrl-kernel-", ignore_cleanup_errors=True) as scratch, \
            _environ({"AGENTRL_PROFILE": profile, "PYTHONPATH": pythonpath, "TMPDIR": scratch, **(env or {})}), \
            _peak_rss(samples) as peak:
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
                kernel_manager_class=_ipc_kernel_manager(),
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

    out = {}
    for index, cell in enumerate(_stored_cells(nb)):
        meta = cell.get("metadata", {}).get("papermill", {})
        if not (meta.get("start_time") and meta.get("end_time")):
            continue
        lo, hi = (datetime.fromisoformat(meta[k].replace("Z", "+00:00")).timestamp() for k in ("start_time", "end_time"))
        inside = [mb for t, mb in samples if lo <= t <= hi + _RSS_EVERY_S]
        if inside:
            out[index] = round(max(inside), 1)
    return out


# --- the whole course ----------------------------------------------------------------------------------------


def _new_run_dir(out_root: Path) -> Path:
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = out_root / stamp
    n = 1
    while run_dir.exists():
        run_dir = out_root / f"{stamp}-{n}"
        n += 1
    run_dir.mkdir(parents=True)
    return run_dir


def extract_plots(run: NotebookRun, plots_dir: Path) -> list[Path]:
    """Save every PNG the executed notebook displayed as `plots_dir/<notebook>_<i>.png` (i counts from 0)."""
    paths = []
    for cell in run.notebook.cells:
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png is None:
                continue
            plot = plots_dir / f"{run.path.stem}_{len(paths)}.png"
            plot.parent.mkdir(parents=True, exist_ok=True)
            plot.write_bytes(base64.b64decode("".join(png) if isinstance(png, list) else png))
            paths.append(plot)
    return paths


def _cell(value: Any) -> str:
    """A value as one markdown table cell."""
    if isinstance(value, float):
        value = f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _scalars(metrics: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Headline numbers: scalar metrics (numbers, strings, booleans), nested dicts flattened as a.b; lists
    (curves) are left to the plots."""
    for key, value in metrics.items():
        if isinstance(value, dict):
            yield from _scalars(value, f"{prefix}{key}.")
        elif isinstance(value, bool | int | float | str) or value is None:
            yield f"{prefix}{key}", value


def _report(
    run_dir: Path, runs: list[NotebookRun], plots: dict[str, list[Path]], profile: str, command: str
) -> str:
    failed = [run for run in runs if run.status != "ok"]
    budget = BUDGET_S[profile]
    lines = [
        f"# Course run {run_dir.name}",
        "",
        f"- command: `{command}`",
        f"- profile: {profile} (budget {budget} s per notebook)",
        f"- device: {device_name()}",
        f"- notebooks: {len(runs)} run, {len(failed)} failed; total {sum(r.seconds for r in runs):.1f} s",
        "",
        "## Notebooks",
        "",
        "| notebook | status | runtime (s) | peak memory (MB) | first error |",
        "|---|---|---:|---:|---|",
    ]
    if profile == "smoke":
        lines[1:1] = ["", "**A smoke run measures plumbing, not learning**: every lesson runs a step or two on a "
                      "handful of items, so its numbers below say that the code ran, not what the method does. "
                      "The cpu and gpu profiles measure.", ""]
    for run in runs:
        over = f" (over the {budget} s budget)" if run.seconds > budget else ""
        memory = f"{run.peak_rss_mb:.0f}" if run.peak_rss_mb else "?"
        if run.over_memory_mb:
            memory += f" (over the {run.over_memory_mb:.0f} MB budget)"
        lines.append(f"| [{run.path.name}]({run.out_path.name}) | {run.status} | {run.seconds:.1f}{over} | {memory} | "
                     f"{_cell(run.error or '')} |")
    heavy = [run for run in runs if run.cell_peak_rss_mb]
    if heavy:
        lines += ["", "Where the memory goes (the three cells during which each kernel held the most; "
                  "cell numbers count markdown cells, from 0):", ""]
        lines += [f"- {run.path.name}: " + ", ".join(f"cell {i} {mb:.0f} MB" for i, mb in run.heaviest_cells())
                  for run in heavy]
    lines += ["", "## Headline numbers", ""]
    results = sorted((run_dir / "results").glob("*.json"))
    if not results:
        lines.append("No notebook wrote a results file in this run.")
    for path in results:
        record = json.loads(path.read_text())
        lines += [
            f"### {path.stem}",
            "",
            f"profile {record.get('profile')} · model `{record.get('model')}` · device {record.get('device')} · "
            f"seed {record.get('seed')} · [results/{path.name}](results/{path.name})",
            "",
            "| metric | value |",
            "|---|---:|",
        ]
        lines += [f"| {_cell(key)} | {_cell(value)} |" for key, value in _scalars(record.get("metrics", {}))]
        lines.append("")
    lines += ["## Plots", ""] if results else ["", "## Plots", ""]
    if not any(plots.values()):
        lines.append("No notebook displayed a plot in this run.")
    for name, paths in plots.items():
        if paths:
            lines += [f"### {name}", ""]
            lines += [f"![{p.stem}](plots/{p.name})" for p in paths]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def run_course(
    notebooks_dir: str | Path = "notebooks",
    profile: str = "auto",
    out_root: str | Path = "runs",
    only: str | None = None,
    command: str | None = None,
) -> Path:
    """Execute every `notebooks_dir/*.ipynb` in name order (those matching the glob `only`, if given) and
    write the run folder described at the top of this module. Returns the run folder.

    A failing notebook does not stop the run; read `runs.json` or the report for the statuses.
    `command` is what results files record as the command that wrote them (default: AGENTRL_COMMAND if
    set, e.g. by `make course`, else the equivalent `agentrl-lite course ...` line).
    """
    profile = resolve_profile(profile)
    notebooks_dir = Path(notebooks_dir)
    notebooks = [
        p for p in sorted(notebooks_dir.glob("*.ipynb")) if only is None or fnmatch.fnmatch(p.name, only)
    ]
    if not notebooks:
        raise FileNotFoundError(
            f"No notebooks matching {only or '*.ipynb'} in {notebooks_dir}/: check --notebooks / --only"
        )
    if command is None:
        only_arg = f" --only '{only}'" if only else ""
        command = os.environ.get("AGENTRL_COMMAND") or (
            f"agentrl-lite course --profile {profile} --notebooks {notebooks_dir.as_posix()}{only_arg}"
        )
    run_dir = _new_run_dir(Path(out_root))
    runs = []
    with _environ({"AGENTRL_RUN_DIR": str(run_dir.resolve()), "AGENTRL_COMMAND": command}):
        progress = tqdm(notebooks, desc=f"course [{profile}]", unit="notebook")
        for notebook in progress:
            progress.set_postfix_str(notebook.name)
            run = execute_notebook(notebook, run_dir / notebook.name, profile, timeout_per_cell=CELL_TIMEOUT_S[profile])
            runs.append(check_memory(run, MEMORY_BUDGET_MB.get(profile), fail=profile == "smoke"))
    plots = {run.path.stem: extract_plots(run, run_dir / "plots") for run in runs}
    write_runs_summary(run_dir, profile, command, runs)
    (run_dir / "report.md").write_text(_report(run_dir, runs, plots, profile, command))
    if only is None:
        record_course_run(run_dir)
    return run_dir


def write_runs_summary(run_dir: Path, profile: str, command: str, runs: list[NotebookRun]) -> None:
    """`run_dir/runs.json`: each notebook's status, wall time, peak memory and heaviest cells, and errors (what
    `record_course_run` reads)."""
    summary = [{"notebook": run.path.name, "status": run.status, "seconds": round(run.seconds, 2),
                "peak_rss_mb": run.peak_rss_mb,
                "heaviest_cells": [{"cell": i, "peak_rss_mb": mb} for i, mb in run.heaviest_cells()],
                "error": run.error, "errors": [asdict(e) for e in run.errors]} for run in runs]
    (run_dir / "runs.json").write_text(
        json.dumps({"profile": profile, "command": command, "device": device_name(), "bf16": _bf16_machine(),
                    "notebooks": summary}, indent=2) + "\n")


def _bf16_machine() -> bool:
    """Whether this machine multiplies bf16 natively, so that the lessons' "auto" choices train under bf16 autocast
    and sample with a bf16 copy (`models.bf16_is_fast`): its runtimes and peaks are not an fp32 machine's."""
    from agentrl_lite.models import bf16_is_fast, resolve_device

    return bf16_is_fast(resolve_device())


def _run_name(run_dir: str | Path) -> str:
    """A run folder as the README names it under runs/: `<timestamp>`, or `<timestamp>/seed_<n>` for one seed of
    a `reproduce` run."""
    path = Path(run_dir).resolve()
    return f"{path.parent.name}/{path.name}" if path.name.startswith("seed_") else path.name


def _keep_other_machine(old: dict | None, new: dict) -> dict:
    """A lesson's new row, keeping (as `other_machine`) the latest row measured on the other kind of machine.

    A machine with bf16 instructions runs a lesson two to three times faster than one without and with other memory
    peaks (results/bench/bench_bf16.json), so the one row would tell a laptop without bf16 a runtime it will not see."""
    if old is None or "bf16" not in old or "bf16" not in new:
        return new
    other = {k: v for k, v in old.items() if k != "other_machine"} if old["bf16"] != new["bf16"] \
        else old.get("other_machine")
    return {**new, "other_machine": other} if other else new


def record_course_run(*run_dirs: str | Path, onto_committed: bool = False) -> Path:
    """Write `results/bench/course_<profile>.json` from whole-course run folders: every notebook's status and wall
    time against its budget, and the total (the README's runtime table reads it; smoke runs go to
    results/smoke/ like every smoke result).

    Several folders (oldest first): a later run of a notebook replaces an earlier one, e.g. one lesson rerun
    with `make course LESSON=05` after a change to it; each notebook records the run it comes from.
    onto_committed: start from the committed file's notebooks (their run folders may be gone: runs/ is not
    committed), so one lesson's new run updates its row and leaves the others as they were measured.
    A notebook row may carry `contended` (why its runtime is too long, written by hand after the run); a later run
    of that notebook replaces the row and drops it. `bf16`: whether its machine trained and sampled in bf16 (runs
    since 2026-11-29 record it; earlier rows carry it by hand, from results/bench/bench_bf16.json); a row replaced by a
    run on the other kind of machine stays as the new row's `other_machine`. `over_budget` counts a lesson over its
    budget on either kind, and `total_seconds_slower_machine` adds each lesson's slower row.
    Every notebook records the machine that ran it (a run folder from before runs.json named it: this machine; a
    committed row without one: the committed file's device); the file's device names them all when they differ.
    """
    summaries = [json.loads((Path(d) / "runs.json").read_text()) for d in run_dirs]
    profiles = {s["profile"] for s in summaries}
    if len(profiles) != 1:
        raise ValueError(f"record_course_run: runs of different profiles {sorted(profiles)}")
    profile = profiles.pop()
    notebooks: dict[str, dict] = {}
    earlier: list[str] = []
    commands = [s["command"] for s in summaries]
    committed = read_results(f"course_{profile}", profile, committed=False) if onto_committed else None
    if committed is not None:
        notebooks, earlier = dict(committed["metrics"]["notebooks"]), list(committed["metrics"]["run_dirs"])
        notebooks = {name: {**n, "device": n.get("device", committed["device"])} for name, n in notebooks.items()}
        commands.insert(0, committed["command"])
    for run_dir, summary in zip(run_dirs, summaries, strict=True):
        for e in summary["notebooks"]:
            row = {"status": e["status"], "seconds": e["seconds"], "peak_rss_mb": e.get("peak_rss_mb"),
                   "run_dir": _run_name(run_dir), "command": summary["command"],
                   "device": summary.get("device", device_name()),
                   **({"bf16": summary["bf16"]} if "bf16" in summary else {})}
            notebooks[e["notebook"]] = _keep_other_machine(notebooks.get(e["notebook"]), row)
    notebooks = dict(sorted(notebooks.items()))
    rows = {name: [n, *([n["other_machine"]] if "other_machine" in n else [])] for name, n in notebooks.items()}
    metrics = {
        "run_dirs": list(dict.fromkeys([*earlier, *(_run_name(d) for d in run_dirs)])),
        "budget_seconds_per_notebook": BUDGET_S[profile],
        "notebooks": notebooks,
        "total_seconds": round(sum(n["seconds"] for n in notebooks.values()), 2),
        "total_seconds_slower_machine": round(sum(max(r["seconds"] for r in rs) for rs in rows.values()), 2),
        "over_budget": [name for name, rs in rows.items() if any(r["seconds"] > BUDGET_S[profile] for r in rs)],
        "failed": [name for name, n in notebooks.items() if n["status"] != "ok"],
    }
    command = " && ".join(dict.fromkeys(commands))
    devices = list(dict.fromkeys(n["device"] for n in notebooks.values()))
    return write_results(f"course_{profile}", metrics, profile=profile, model="SmolLM2-135M-Instruct (embedded)",
                         seed=0, command=command, device=" and ".join(devices) if devices else None)


def failed_notebooks(run_dir: str | Path) -> list[str]:
    """Names of the notebooks that failed in a run folder written by `run_course`."""
    summary = json.loads((Path(run_dir) / "runs.json").read_text())
    return [entry["notebook"] for entry in summary["notebooks"] if entry["status"] != "ok"]
