"""Results bookkeeping (course tooling): every number a lesson claims comes from a results file
(`results/<name>.json`) that records the profile, model, device, seed, command and date of the run that
wrote it."""

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

from agentrl_lite.tasks import REPO_ROOT


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


def results_dir(profile: str, committed: bool = False) -> Path:
    """Where results of this profile are written: cpu results under results/ and gpu results under results/gpu/,
    both committed; smoke results under results/smoke/ (ignored by git), so a smoke run never overwrites a real
    one and a gpu run never overwrites the cpu numbers the lessons quote. AGENTRL_RESULTS moves
    the writes (each seed of `reproduce` writes into its own run folder); committed=True ignores it: where the
    committed files are."""
    root = REPO_ROOT / "results" if committed else Path(os.environ.get("AGENTRL_RESULTS", REPO_ROOT / "results"))
    return profile_folder(root, profile)


def profile_folder(root: Path, profile: str) -> Path:
    """The folder under a results root that holds one profile's files: root itself for cpu, root/<profile> for
    smoke and gpu."""
    return root / profile if profile in ("smoke", "gpu") else root


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


def write_results(
    name: str, metrics: dict[str, Any], *, profile: str, model: str, seed: int, command: str | None = None,
    device: str | None = None,
) -> Path:
    """Write `results/<name>.json` with the schema every committed results file has (tests/test_results.py) and return its path.

    device: the machine that measured, when that is not this one (a summary of seeds run elsewhere).

    When AGENTRL_RUN_DIR is set (by `make course`), a copy also goes to `$AGENTRL_RUN_DIR/results/` so
    the run's report can quote it.
    """
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
    path = results_dir(profile) / f"{name}.json"
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
    path = results_dir(profile or "cpu", committed) / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def metric(record: dict[str, Any], path: str) -> Any:
    """A value from a results record's metrics by dotted path, e.g. "ours.dapo.heldout_after.accuracy"."""
    value: Any = record["metrics"]
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise KeyError(f"results/{record.get('_name', '?')}: no metric {path!r} (missing {key!r})")
        value = value[key]
    return value


def committed_rows(name: str, fields: dict[str, str], this_run: dict[str, Any] | None = None,
                   digits: int = 3) -> list[dict[str, Any]]:
    """Rows (label, committed cpu value, and this run's value when given) of the committed results file
    `results/<name>.json`: what a lesson's "What you should see" quotes, read from the file, never retyped.

    fields: label → dotted metric path. this_run: the notebook's own metrics dict, for a side-by-side column.
    """
    record = read_results(name)
    if record is None:
        raise FileNotFoundError(f"results/{name}.json is missing: run the lesson in the cpu profile to write it")
    record["_name"] = name

    def shown(value: Any) -> Any:
        return round(value, digits) if isinstance(value, float) else value

    rows = []
    for label, path in fields.items():
        row = {"": label, f"committed cpu run ({record['date'][:10]}, seed {record['seed']})": shown(metric(record, path))}
        if this_run is not None:
            row["this run"] = shown(metric({"metrics": this_run, "_name": "this run"}, path))
        rows.append(row)
    return rows
