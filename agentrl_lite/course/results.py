"""Results bookkeeping (course tooling): every number a lesson claims comes from a results file that records the
profile, model, device, seed, command and date of the run that wrote it.

    results/lessons/<name>.json   cpu runs of the lessons, their seed studies and tuning variants
    results/bench/<name>.json     benchmarks (`bench_*`) and whole-course runs (`course_*`)
    results/gpu/<name>.json       anything run in the gpu profile
    results/smoke/<name>.json     smoke runs (ignored by git): a smoke run never overwrites a real one
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

import torch

from agentrl_lite.paths import course_root


def device_name() -> str:
    """The GPU's name when one is used, else the CPU model (from /proc/cpuinfo on Linux)."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def results_root(committed: bool = False) -> Path:
    """The results folder writes go to: $AGENTRL_RESULTS when set (each seed of `reproduce` writes into its own run
    folder), else the checkout's results/. committed=True ignores AGENTRL_RESULTS: where the committed files are."""
    if not committed and (moved := os.environ.get("AGENTRL_RESULTS")):
        return Path(moved)
    return course_root() / "results"


def kind_of(name: str) -> str:
    """The folder of a cpu results file: `bench` for benchmarks and whole-course runs, else `lessons`."""
    return "bench" if name.startswith(("bench_", "course_")) else "lessons"


def result_path(root: Path, profile: str, name: str) -> Path:
    """Where the results file `name` of `profile` lives under a results root (see the module docstring)."""
    if profile not in ("smoke", "cpu", "gpu"):
        raise ValueError(f"unknown profile {profile!r}: results are kept for smoke, cpu and gpu")
    return root / (kind_of(name) if profile == "cpu" else profile) / f"{name}.json"


def current_command() -> str:
    """The command that produced this run: AGENTRL_COMMAND if a runner set it, else this process's argv.

    Inside a Jupyter kernel started by hand (JupyterLab, or papermill without AGENTRL_COMMAND) argv is only the
    kernel launcher's, which nobody can re-run; the record then says so instead.
    """
    if command := os.environ.get("AGENTRL_COMMAND"):
        return command
    if sys.argv and "ipykernel" in Path(sys.argv[0]).name:
        return "interactive Jupyter kernel (no command line): the notebook run top to bottom"
    return " ".join(shlex.quote(a) for a in sys.argv)


def own_peak_rss_mb() -> float | None:
    """The most resident memory this process has held so far, in MB (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux, bytes on macOS
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def write_results(
    name: str, metrics: dict[str, Any], *, profile: str, model: str, seed: int, command: str | None = None,
    device: str | None = None,
) -> Path:
    """Write the results file `name` (see the module docstring for where) with the schema every committed results file
    has (tests/test_results.py) and return its path.

    device: the machine that measured, when that is not this one (a summary of seeds run elsewhere).

    When AGENTRL_RUN_DIR is set (by `make course`), a copy also goes to `$AGENTRL_RUN_DIR/results/` so
    the run's report can quote it.

    A lesson's own results (metrics with `notebook_seconds`) also get `phase_seconds`: where this process's seconds
    went so far, by phase (`agentrl_lite.phases`); `course_runs.record_course_run` copies them to the runtime table.
    They also get `peak_rss_mb`: the most resident memory this process has held (its own pages; what it starts,
    such as lesson 10's compiled candidates, is in the runner's measure of the whole kernel, `course.memory`).
    """
    from agentrl_lite.phases import totals

    if "notebook_seconds" in metrics and "phase_seconds" not in metrics and (spent := totals()):
        metrics = {**metrics, "phase_seconds": spent}
    if "notebook_seconds" in metrics and "peak_rss_mb" not in metrics and (peak := own_peak_rss_mb()) is not None:
        metrics = {**metrics, "peak_rss_mb": peak}
    record = {
        "profile": profile,
        "model": model,
        "device": device or device_name(),
        "seed": seed,
        "command": command or current_command(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "metrics": metrics,
    }
    text = json.dumps(record, indent=2, sort_keys=False) + "\n"
    path = result_path(results_root(), profile, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    run_dir = os.environ.get("AGENTRL_RUN_DIR")
    if run_dir:
        copy = Path(run_dir) / "results" / f"{name}.json"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
    return path


def read_results(name: str, profile: str | None = None, committed: bool = True) -> dict[str, Any] | None:
    """Read a committed results file (cpu/gpu, or smoke when asked); None when it does not exist. A lesson run
    by `reproduce` writes elsewhere (AGENTRL_RESULTS) and still reads the committed files of other lessons;
    committed=False reads where this process writes instead."""
    path = result_path(results_root(committed), profile or "cpu", name)
    return json.loads(path.read_text()) if path.exists() else None


def metric(record: dict[str, Any], path: str) -> Any:
    """A value from a results record's metrics by dotted path, e.g. "ours.dapo.heldout_after.accuracy"."""
    value: Any = record["metrics"]
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise KeyError(f"results/{record.get('_name', '?')}: no metric {path!r} (missing {key!r})")
        value = value[key]
    return value


def seeds_of(record: dict[str, Any]) -> str:
    """The seeds a results record's numbers come from, in words: its metrics' `seeds` when it ran several ("seeds 0,
    3, 7"; a run of three or more consecutive seeds as "seeds 0–9"), or the one list of seeds its parts share (a
    study run in several settings, each with its `seeds`), else its seed ("seed 0")."""
    seeds = record["metrics"].get("seeds")
    if seeds is None:
        parts = {tuple(v["seeds"]) for v in record["metrics"].values() if isinstance(v, dict) and isinstance(v.get("seeds"), list)}
        seeds = list(parts.pop()) if len(parts) == 1 else None
    if not isinstance(seeds, list) or len(seeds) < 2:
        return f"seed {record['seed']}"
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}–{seeds[-1]}"
    return "seeds " + ", ".join(map(str, seeds))


def runtime_line(notebook: str) -> str:
    """How long the lesson `notebook` ("00_the_policy.ipynb") took when last measured, in one line read from the
    committed files: its row of the last whole-course cpu run (results/bench/course_cpu.json) and its smoke run in
    the last timed test suite (results/bench/bench_test_suite.json). A file or row that is missing is said so."""
    course = read_results("course_cpu")
    row = course["metrics"]["notebooks"].get(notebook) if course else None
    if row is None:
        cpu = "cpu: not measured yet (no row in results/bench/course_cpu.json)"
    else:
        cpu = (f"cpu: {row['seconds'] / 60:.1f} min, peak memory {row['peak_rss_mb']:.0f} MB "
               f"({row['status']}; {row['device']}; {row['command']}; file of {course['date'][:10]})")
    suite = read_results("bench_test_suite")
    seconds = suite["metrics"]["notebook_seconds"].get(f"notebooks/{notebook}") if suite else None
    if seconds is None:
        smoke = "smoke: not measured yet (no row in results/bench/bench_test_suite.json)"
    else:
        smoke = (f"smoke: {seconds:.0f} s in the last timed test suite ({suite['metrics']['workers']} test workers "
                 "side by side; a smoke run's numbers prove the plumbing only)")
    return f"runtime as last measured · {cpu} · {smoke}"


def committed_rows(name: str, fields: dict[str, str], this_run: dict[str, Any] | None = None,
                   digits: int = 3) -> list[dict[str, Any]]:
    """Rows (label, committed cpu value, and this run's value when given) of the committed results file
    `name`: what a lesson's "What you should see" quotes, read from the file, never retyped.

    fields: label → dotted metric path. this_run: the notebook's own metrics dict, for a side-by-side column.
    """
    record = read_results(name)
    if record is None:
        raise FileNotFoundError(f"{result_path(results_root(True), 'cpu', name)} is missing: run the lesson in the "
                                "cpu profile to write it")
    record["_name"] = name

    def shown(value: Any) -> Any:
        return round(value, digits) if isinstance(value, float) else value

    rows = []
    header = f"committed cpu run ({record['date'][:10]}, {seeds_of(record)})"
    for label, path in fields.items():
        row = {"": label, header: shown(metric(record, path))}
        if this_run is not None:
            row["this run"] = shown(metric({"metrics": this_run, "_name": "this run"}, path))
        rows.append(row)
    return rows
