"""Grading students' notebooks: the solution passes every check, the untouched exercise fails every one (its stubs
raise), and a deleted check is missing, not passed."""

from __future__ import annotations

import csv
import shutil

import nbformat
import pytest

from agentrl_lite.course.grade import expected_checks, grade, lesson_of, main
from agentrl_lite.paths import course_root

ROOT = course_root()
LESSON = "03_policy_gradients.ipynb"

pytestmark = pytest.mark.notebooks


def test_the_checks_to_pass_come_from_the_committed_exercise_of_the_lesson_in_the_title():
    nb = nbformat.read(str(ROOT / "solutions" / LESSON), as_version=4)
    assert lesson_of(nb) == "03"
    names = expected_checks("03")
    assert "group advantages" in names and len(names) == len(set(names)) >= 4
    with pytest.raises(ValueError, match="lesson title"):
        lesson_of(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("no title")]))


def test_solution_passes_exercise_fails_and_a_deleted_check_is_missing(tmp_path):
    solution = grade(ROOT / "solutions" / LESSON)
    assert solution["failed"] == solution["missing"] == 0 and solution["score"] == 1.0, solution
    untouched = grade(ROOT / "exercises" / LESSON)
    assert untouched["failed"] == len(untouched["checks"]) and untouched["score"] == 0.0, untouched

    nb = nbformat.read(str(ROOT / "solutions" / LESSON), as_version=4)
    for cell in nb.cells:  # a student who deletes one check
        if cell.cell_type == "code" and 'check("k3 KL estimator"' in cell.source:
            cell.source = "# deleted"
    edited = tmp_path / "alice_week4.ipynb"  # renamed: the title still says lesson 03
    nbformat.write(nb, str(edited))
    alice = grade(edited)
    assert alice["checks"]["k3 KL estimator"] == "missing" and alice["missing"] == 1
    assert alice["passed"] == len(alice["checks"]) - 1

    out = tmp_path / "grades.csv"
    shutil.copy(edited, tmp_path / "bob.ipynb")
    assert main([str(tmp_path / "bob.ipynb"), "--csv", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert {r["check"] for r in rows} == set(alice["checks"]) and {r["outcome"] for r in rows} == {"pass", "missing"}
