"""Grade students' exercise notebooks (course tooling): `agentrl-lite grade SUBMISSION.ipynb ... --csv grades.csv`.

Each submission runs top to bottom in a fresh kernel (the smoke profile by default: the checks test the
student's code, not a training run's numbers), every cell even after an error, and its checks are read from what
they printed (`PASS: <name>` / `FAIL: <name> — <reason>`, `exercises.check`). The checks a submission must pass
are those of the committed exercise notebook of the same lesson (found from the notebook's title, "# 04 · ...",
so a renamed file still grades): a check the student deleted counts as missing, not as passed. A submission that
cannot run at all (a kernel crash, a cell over the time limit) gets every check failed and the reason.
"""

from __future__ import annotations

import argparse
import csv
import re
import tempfile
from pathlib import Path
from typing import Any

import nbformat

from agentrl_lite.course.exercises import check_outcomes
from agentrl_lite.paths import course_root

CHECK_NAME_RE = re.compile(r"""\bcheck\(\s*(["'])(?P<name>.+?)\1""")
TITLE_RE = re.compile(r"^#\s*(?:Exercises\s+)?(\d{2})\b")


def lesson_of(nb: nbformat.NotebookNode) -> str:
    """The two-digit lesson number in a notebook's title cell ("# 04 · GRPO on an LLM" → "04")."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (match := TITLE_RE.match(cell.source.strip())):
            return match.group(1)
    raise ValueError("no lesson title (a first markdown cell starting '# NN ·') in the submission")


def expected_checks(lesson: str, exercises_dir: Path | None = None) -> list[str]:
    """The check names of the committed exercise notebook of `lesson`, in order."""
    found = sorted((exercises_dir or course_root() / "exercises").glob(f"{lesson}_*.ipynb"))
    if not found:
        raise FileNotFoundError(f"no exercises/{lesson}_*.ipynb to grade against")
    nb = nbformat.read(str(found[0]), as_version=4)
    names = [m.group("name") for cell in nb.cells if cell.cell_type == "code"
             for m in CHECK_NAME_RE.finditer(cell.source)]
    return list(dict.fromkeys(names))


def grade(path: str | Path, profile: str = "smoke", timeout_per_cell: int = 600,
          exercises_dir: Path | None = None) -> dict[str, Any]:
    """Run one submission and grade it: {submission, lesson, passed, failed, missing, score, checks, error}."""
    from agentrl_lite.course.runner import execute_notebook

    path = Path(path)
    lesson = lesson_of(nbformat.read(str(path), as_version=4))
    expected = expected_checks(lesson, exercises_dir)
    with tempfile.TemporaryDirectory(prefix="agentrl-grade-") as scratch:
        run = execute_notebook(path, Path(scratch) / path.name, profile, timeout_per_cell=timeout_per_cell,
                               allow_errors=True)
        outcomes = check_outcomes(run.notebook)
    stopped = [e for e in run.errors if e.ename in ("CellTimeoutError", "DeadKernelError", "RuntimeError")]
    checks = {name: ("pass" if outcomes.get(name) else "fail" if name in outcomes else "missing") for name in expected}
    passed = sum(v == "pass" for v in checks.values())
    return {"submission": str(path), "lesson": lesson, "passed": passed,
            "failed": sum(v == "fail" for v in checks.values()), "missing": sum(v == "missing" for v in checks.values()),
            "score": passed / len(expected) if expected else 0.0, "checks": checks,
            "error": f"{stopped[0].ename}: {stopped[0].evalue}" if stopped else "", "seconds": round(run.seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentrl-lite grade", description=__doc__.split("\n")[0])
    parser.add_argument("submissions", nargs="+", help="students' notebooks")
    parser.add_argument("--profile", default="smoke", choices=["smoke", "cpu", "gpu"])
    parser.add_argument("--csv", default=None, help="write one row per submission and check here")
    args = parser.parse_args(argv)
    rows = []
    for submission in args.submissions:
        row = grade(submission, args.profile)
        rows.append(row)
        print(f"{row['submission']}: lesson {row['lesson']}, {row['passed']}/{len(row['checks'])} checks pass"
              + (f", {row['missing']} missing" if row["missing"] else "") + (f" ({row['error']})" if row["error"] else ""))
        for name, outcome in row["checks"].items():
            print(f"  {outcome.upper():8} {name}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["submission", "lesson", "check", "outcome", "score", "error"])
            for row in rows:
                for name, outcome in row["checks"].items():
                    writer.writerow([row["submission"], row["lesson"], name, outcome, f"{row['score']:.3f}", row["error"]])
        print("wrote", args.csv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
