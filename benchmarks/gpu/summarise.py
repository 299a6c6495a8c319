"""Summarise the executed notebooks a lent GPU machine sent back (benchmarks/gpu/run.sh) into one results file.

Each call's tarball of executed notebooks is unpacked into its own folder; this reads every executed notebook in
them and records, per notebook: the run's folder, how far it got (cells completed / total), its first error
(type and first line), and every "... steps in N s" line it printed (training time on the GPU).

Usage: python benchmarks/gpu/summarise.py OUT.json --call "DESCRIPTION" FOLDER [--call "DESCRIPTION" FOLDER ...]
           --device "NAME" --note "TEXT"
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from agentrl_lite.course.results import write_results

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def executed(path: Path) -> dict:
    notebook = json.loads(path.read_text())
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    status = [c.get("metadata", {}).get("papermill", {}).get("status") for c in cells]
    error, printed = None, []
    for cell in cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and error is None:
                error = f"{output['ename']}: {ANSI.sub('', output['evalue']).splitlines()[0][:240] if output['evalue'] else ''}"
            if output.get("output_type") == "stream":
                printed += [line.strip() for line in "".join(output["text"]).splitlines()
                            if re.search(r"\bsteps in \d+ s\b", line)]
    record = {"notebook": path.name, "run": str(path.parent), "cells_completed": status.count("completed"),
              "cells": len(cells), "finished": status.count("completed") == len(cells), "first_error": error,
              "timings_printed": printed}
    runs = path.parent / "runs.json"  # the course runner's verdict (a memory budget can fail a finished notebook)
    if runs.is_file():
        (verdict,) = [n for n in json.loads(runs.read_text())["notebooks"] if n["notebook"] == path.name]
        record |= {"status": verdict["status"], "seconds": verdict["seconds"], "peak_rss_mb": verdict["peak_rss_mb"],
                   "runner_error": (verdict["error"] or "")[:240] or None}
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="results name, e.g. gpu_check_20261126 (written to results/gpu/<name>.json)")
    parser.add_argument("--call", nargs=2, action="append", metavar=("DESCRIPTION", "FOLDER"), required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--note", required=True)
    args = parser.parse_args()
    calls = [{"call": description, "notebooks": [executed(p) for p in sorted(Path(folder).rglob("*.ipynb"))]}
             for description, folder in args.call]
    for call in calls:
        for nb in call["notebooks"]:
            nb["run"] = nb["run"].split("runs/", 1)[-1]
    path = write_results(args.out, {"calls": calls, "note": args.note}, profile="gpu", model="SmolLM2-135M-Instruct (embedded)",
                         seed=0, command="benchmarks/gpu/stage.sh, then benchmarks/gpu/run.sh (see each call)")
    record = json.loads(path.read_text())
    record["device"] = args.device  # written on this machine, measured on the lent one
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(path)


if __name__ == "__main__":
    main()
