"""Whole-course runs (course tooling): run every lesson into `runs/<timestamp>/` with a report, and keep the
record of each lesson's latest runtime (`results/bench/course_<profile>.json`).

`run_course` writes, under `runs/<UTC timestamp>/`: the executed notebooks, `plots/<notebook>_<i>.png` (every PNG a
notebook displayed), `results/*.json` (copies of the results files the lessons wrote, see
`course.results.write_results`), `runs.json` (status per notebook, for machines) and `report.md` (status and runtime
per notebook, headline numbers, plots).
"""

from __future__ import annotations

import base64
import datetime as _dt
import fnmatch
import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from agentrl_lite.course.budgets import BUDGET_S, CELL_TIMEOUT_S, MEMORY_BUDGET_MB
from agentrl_lite.course.profiles import resolve_profile
from agentrl_lite.course.results import device_name, read_results, write_results
from agentrl_lite.course.runner import NotebookRun, _environ, check_memory, execute_notebook


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


def lesson_phase_seconds(run_dir: str | Path, notebook: str) -> dict[str, float] | None:
    """The seconds by phase (`agentrl_lite.phases`) a notebook's run recorded in its own results file, found in the
    run folder (a course run's results/ copies, or a seed folder's files) by the lesson's number; None when the
    run predates phase timing."""
    found = []
    for path in sorted(Path(run_dir).rglob(f"{notebook[:2]}_*.json")):
        metrics = json.loads(path.read_text()).get("metrics", {})
        if isinstance(metrics, dict) and "phase_seconds" in metrics:
            found.append((metrics.get("notebook_seconds", 0.0), metrics["phase_seconds"]))
    return max(found, key=lambda f: f[0])[1] if found else None


def record_course_run(*run_dirs: str | Path, onto_committed: bool = False) -> Path:
    """Write `results/bench/course_<profile>.json` from whole-course run folders: every notebook's status and wall
    time against its budget, and the total (the README's runtime table reads it; smoke runs go to
    results/smoke/ like every smoke result).

    Several folders (oldest first): a later run of a notebook replaces an earlier one, e.g. one lesson rerun
    with `make course LESSON=05` after a change to it; each notebook records the run it comes from.
    onto_committed: start from the committed file's notebooks (their run folders may be gone: runs/ is not
    committed), so one lesson's new run updates its row and leaves the others as they were measured.
    A row carries `phase_seconds` where the lesson's results file recorded them (`lesson_phase_seconds`).
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
            phases = lesson_phase_seconds(run_dir, e["notebook"])
            row = {"status": e["status"], "seconds": e["seconds"], "peak_rss_mb": e.get("peak_rss_mb"),
                   "run_dir": _run_name(run_dir), "command": summary["command"],
                   "device": summary.get("device", device_name()),
                   **({"bf16": summary["bf16"]} if "bf16" in summary else {}),
                   **({"phase_seconds": phases} if phases else {})}
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

