"""Executed lessons kept for the course site (course tooling): `docs/executed/NN_*.ipynb` holds, per lesson, the
executed copy of the cpu-profile run whose results file is committed, which its site page shows
(`course.site`). `reproduce` keeps seed 0's copy when it writes the lesson's committed results file; after a
`make course PROFILE=cpu` run, keep a lesson with `agentrl-lite site --keep runs/<ts>/<notebook> <results name>`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl_lite.paths import course_root

EXECUTED = "docs/executed"
"""committed executed lessons, one per lesson at most: what its site page shows"""
WIDGET = "application/vnd.jupyter.widget-view+json"


def keep_executed(executed: str | Path, results: str, root: Path | None = None) -> Path:
    """Store an executed lesson under docs/executed/ for its site page: the notebook `executed` (a cpu-profile run's
    copy, e.g. runs/<ts>/seed_0/08_credit_assignment.ipynb) and the committed results file `results` (e.g.
    "08_credit_assignment") it wrote. The copy keeps the outputs, drops widget views and run metadata, and records
    the results file's command, machine, seed and date, which the page's banner shows and a test compares with
    the committed file (a rerun whose page was not replaced is caught)."""
    import nbformat

    from agentrl_lite.course.results import read_results

    root = root or course_root()
    record = read_results(results, "cpu", committed=True)
    if record is None:
        raise FileNotFoundError(f"keep_executed: no committed cpu results file {results!r}")
    nb = nbformat.read(str(executed), as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
        outputs = []
        for output in cell.get("outputs", []):
            if WIDGET in output.get("data", {}):
                output["data"] = {k: v for k, v in output["data"].items() if k != WIDGET}
                if not output["data"]:
                    continue
            outputs.append(output)
        cell.outputs = outputs
    nb.metadata = {"kernelspec": nb.metadata.get("kernelspec", {}), "language_info": {"name": "python"},
                   "agentrl_run": {"results": results, **{k: record[k] for k in ("command", "device", "seed", "date",
                                                                                  "profile")},
                                   "notebook_seconds": record["metrics"].get("notebook_seconds")}}
    out = root / EXECUTED / Path(executed).name
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(out))
    return out


def executed_run(path: Path) -> dict[str, Any] | None:
    """The run an executed lesson under docs/executed/ records (`keep_executed`), or None."""
    return json.loads(path.read_text()).get("metadata", {}).get("agentrl_run")
