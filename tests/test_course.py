"""Exercise generation and check cells (agentrl_lite.course): no kernels, runs in about a second."""

from __future__ import annotations

import ast
import copy
import json
import linecache
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from agentrl_lite.course.cli import main
from agentrl_lite.course.exercises import (
    GENERATED_KEY,
    build_exercises,
    check,
    check_outcomes,
    make_exercise,
    notebook_text,
    strip_outputs,
    with_wrong_decisions,
    wrong_decision_outcomes,
    wrong_decisions,
)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

METHOD_SOURCE = '''class Baseline:
    def value(self, rewards):
        """Mean reward of the group."""
        # BEGIN SOLUTION: average the rewards
        total = sum(rewards)
        return total / len(rewards)
        # END SOLUTION'''
METHOD_STUB = '''class Baseline:
    def value(self, rewards):
        """Mean reward of the group."""
        raise NotImplementedError("Exercise: average the rewards")'''
TOP_LEVEL_SOURCE = "x = 1\n# BEGIN SOLUTION\ny = x + 1\n# END SOLUTION\nprint(x)"
TOP_LEVEL_STUB = 'x = 1\nraise NotImplementedError("Exercise: your code here")\nprint(x)'


def _notebook(*sources: str) -> nbformat.NotebookNode:
    """A solution notebook: a title, a parameters cell, then one executed code cell per source."""
    params = new_code_cell('import os\n\nPROFILE = os.environ.get("AGENTRL_PROFILE", "auto")')
    params.metadata["tags"] = ["parameters"]
    cells = [new_markdown_cell("# Title"), params]
    for n, source in enumerate(sources, start=1):
        cell = new_code_cell(source, execution_count=n)
        cell.outputs = [new_output("stream", name="stdout", text="PASS: something\n")]
        cell.metadata["execution"] = {"iopub.status.idle": "2025-01-01T00:00:00Z"}
        cells.append(cell)
    nb = new_notebook(
        cells=cells,
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell{i}"
    return nb


def _write(path: Path, nb: nbformat.NotebookNode) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(notebook_text(nb))
    return path


def test_make_exercise_replaces_regions_at_their_indentation_with_the_hint() -> None:
    solution = _notebook(METHOD_SOURCE, TOP_LEVEL_SOURCE)
    before = copy.deepcopy(solution)
    exercise = make_exercise(solution, source="solutions/99_demo.ipynb")
    assert solution == before, "make_exercise must not modify its input"
    code = [cell for cell in exercise.cells if cell.cell_type == "code"]
    assert [cell.source for cell in code] == [solution.cells[1].source, METHOD_STUB, TOP_LEVEL_STUB]
    assert code[0].metadata["tags"] == ["parameters"], "cell metadata (tags) must survive"


def test_make_exercise_strips_outputs_and_marks_itself_generated() -> None:
    exercise = make_exercise(_notebook(METHOD_SOURCE), source="solutions/99_demo.ipynb")
    text = notebook_text(exercise)
    assert "SOLUTION" not in text and "total = sum(rewards)" not in text
    for cell in exercise.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None and "execution" not in cell.metadata
    notice = exercise.cells[0]
    assert notice.cell_type == "markdown" and "solutions/99_demo.ipynb" in notice.source
    assert "edit the solution, not this file" in notice.source
    assert exercise.metadata[GENERATED_KEY] == {"generated_from": "solutions/99_demo.ipynb"}
    assert exercise.cells[1].source == "# Title"


def test_make_exercise_replaces_a_model_answer_by_a_prompt() -> None:
    solution = _notebook(METHOD_SOURCE)
    answer = new_markdown_cell("**Model answer.** The mean, because the group shares one prompt.")
    answer.metadata["tags"] = ["model-answer"]
    solution.cells.append(answer)
    exercise = make_exercise(solution)
    assert "Model answer" not in notebook_text(exercise) and "group shares one prompt" not in notebook_text(exercise)
    assert exercise.cells[-1].source.startswith("**Your answer.**")
    assert exercise.cells[-1].metadata["tags"] == ["model-answer"]


def test_fixture_exercise_is_valid_python() -> None:
    exercise = make_exercise(FIXTURES / "solutions" / "00_tiny.ipynb")
    for cell in exercise.cells:
        if cell.cell_type == "code":
            ast.parse(cell.source)  # a SyntaxError here means the stub broke the cell
    assert (
        sum("NotImplementedError" in cell.source for cell in exercise.cells if cell.cell_type == "code") == 1
    )


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("def f():\n    # BEGIN SOLUTION\n    return 1\n", "never closed"),
        ("def f():\n    return 1\n    # END SOLUTION\n", "without a '# BEGIN SOLUTION'"),
        ("# BEGIN SOLUTION\na = 1\n# BEGIN SOLUTION: again\nb = 2\n# END SOLUTION\n", "do not nest"),
    ],
)
def test_make_exercise_rejects_unbalanced_regions_naming_file_and_cell(
    source: str, problem: str, tmp_path: Path
) -> None:
    path = _write(tmp_path / "07_bad.ipynb", _notebook("a = 0", source))
    with pytest.raises(ValueError, match=problem) as info:
        make_exercise(path)
    assert "07_bad.ipynb" in str(info.value) and "cell 3" in str(info.value)


DECISION_SOURCE = '''def choose(found):
    """The weight to train with."""
    # BEGIN SOLUTION: the weight with a gain and no loss
    return next(w for w, v in found.items() if v == "gain")
    # BEGIN WRONG: the largest weight
    # best = max(found)
    #
    # return best
    # END WRONG
    # BEGIN WRONG: always the first
    # return 1.0
    # END WRONG
    # END SOLUTION'''
CHECK_SOURCE = '''def test_choice():
    assert choose({1.0: "gain", 4.0: "loss"}) == 1.0

check("choice", test_choice)'''


def test_wrong_decisions_replay_the_cells_up_to_the_check_with_the_region_replaced() -> None:
    solution = _notebook("x = 0", DECISION_SOURCE, "found = {}", CHECK_SOURCE)
    found = wrong_decisions(solution, "solutions/99_demo.ipynb")
    assert [(w.why, w.decision_cell, w.check_cell) for w in found] == [
        ("the largest weight", 3, 5), ("always the first", 3, 5)]
    largest = found[0].sources
    assert largest[1:] == ("found = {}", CHECK_SOURCE), "the cells after the decision replay unchanged"
    assert "    best = max(found)\n\n    return best\n    # END SOLUTION" in largest[0]
    assert "return next(" not in largest[0] and "return 1.0" not in largest[0], "only that wrong decision is code"
    assert largest[0].startswith('def choose(found):\n    """The weight to train with."""\n    # BEGIN SOLUTION')
    ast.parse(largest[0])
    exercise = notebook_text(make_exercise(solution))
    assert "WRONG" not in exercise and "max(found)" not in exercise, "the exercise must not show the wrong decisions"
    replayed, listed = with_wrong_decisions(solution)
    assert listed == found and replayed.cells[: len(solution.cells)] == solution.cells
    extra = replayed.cells[len(solution.cells):]
    assert [c.metadata["wrong-decision"] for c in extra] == ["the largest weight"] * 3 + ["always the first"] * 3
    extra[2].outputs = [new_output("stream", name="stdout", text="FAIL: choice — assertion failed\n"),
                        new_output("error", ename="AssertionError", evalue="choice", traceback=[])]
    extra[5].outputs = [new_output("stream", name="stdout", text="PASS: choice\n")]
    assert wrong_decision_outcomes(replayed) == {"the largest weight": (False, "AssertionError"),
                                                 "always the first": (True, None)}


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("# BEGIN WRONG: outside\n# a = 1\n# END WRONG\ncheck('c', f)", "outside a solution region"),
        ("# BEGIN SOLUTION\na = 1\n# BEGIN WRONG: open\n# a = 2\n# END SOLUTION\ncheck('c', f)", "never closed"),
        ("# BEGIN SOLUTION\na = 1\n# BEGIN WRONG: bare\na = 2\n# END WRONG\n# END SOLUTION\ncheck('c', f)",
         "commented out"),
        ("# BEGIN SOLUTION\na = 1\n# BEGIN WRONG: empty\n#\n# END WRONG\n# END SOLUTION\ncheck('c', f)", "no code"),
        ("# BEGIN SOLUTION\na = 1\n# BEGIN WRONG: unchecked\n# a = 2\n# END WRONG\n# END SOLUTION", "no check cell"),
    ],
)
def test_wrong_decisions_reject_malformed_blocks_naming_the_cell(source: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as info:
        wrong_decisions(_notebook("a = 0", source), "solutions/07_bad.ipynb")
    assert "07_bad.ipynb: cell 3" in str(info.value)


def test_build_exercises_writes_then_reports_exactly_what_is_stale(tmp_path: Path) -> None:
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    _write(solutions / "01_a.ipynb", _notebook(METHOD_SOURCE))
    _write(solutions / "02_b.ipynb", _notebook(TOP_LEVEL_SOURCE))
    assert build_exercises(solutions, exercises, check=True) == [
        exercises / "01_a.ipynb",
        exercises / "02_b.ipynb",
    ]
    assert not exercises.exists(), "check=True must write nothing"

    assert build_exercises(solutions, exercises) == [exercises / "01_a.ipynb", exercises / "02_b.ipynb"]
    assert build_exercises(solutions, exercises, check=True) == []
    assert "Generated from `solutions/01_a.ipynb`" in (exercises / "01_a.ipynb").read_text()

    _write(solutions / "02_b.ipynb", _notebook(TOP_LEVEL_SOURCE.replace("y = x + 1", "y = x + 2")))
    assert build_exercises(solutions, exercises, check=True) == [], "a change inside a region does not show"
    _write(solutions / "02_b.ipynb", _notebook(TOP_LEVEL_SOURCE.replace("print(x)", "print(x, y)")))
    assert build_exercises(solutions, exercises, check=True) == [exercises / "02_b.ipynb"]

    (solutions / "01_a.ipynb").unlink()
    _write(exercises / "90_hand_written.ipynb", _notebook("a = 1"))
    assert build_exercises(solutions, exercises, check=True) == [
        exercises / "02_b.ipynb",
        exercises / "01_a.ipynb",
    ]
    build_exercises(solutions, exercises)
    assert sorted(p.name for p in exercises.iterdir()) == ["02_b.ipynb", "90_hand_written.ipynb"], (
        "orphaned generated exercises are removed, hand-written notebooks are kept"
    )


def test_build_exercises_is_byte_for_byte_deterministic(tmp_path: Path) -> None:
    solutions = tmp_path / "solutions"
    _write(solutions / "01_a.ipynb", _notebook(METHOD_SOURCE, TOP_LEVEL_SOURCE))
    build_exercises(solutions, tmp_path / "first")
    build_exercises(solutions, tmp_path / "second")
    first, second = (
        (tmp_path / "first" / "01_a.ipynb").read_bytes(),
        (tmp_path / "second" / "01_a.ipynb").read_bytes(),
    )
    assert first == second and first.endswith(b"\n")


def test_repository_exercises_are_up_to_date() -> None:
    if not list((REPO / "solutions").glob("*.ipynb")):
        pytest.skip("no solution notebooks yet")
    stale = build_exercises(REPO / "solutions", REPO / "exercises", check=True)
    assert stale == [], f"stale exercises {stale}: run `agentrl-lite exercises` and commit the result"


def test_check_prints_pass_and_returns_true(capsys: pytest.CaptureFixture[str]) -> None:
    def passes() -> None:
        assert 1 + 1 == 2

    assert check("adds", passes) is True
    assert capsys.readouterr().out == "PASS: adds\n"


def test_check_reraises_not_implemented_so_the_exercise_cell_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stub_error = NotImplementedError("Exercise: your code here")

    def stub() -> None:
        raise stub_error

    with pytest.raises(NotImplementedError) as info:
        check("group advantages", stub)
    assert info.value is stub_error
    assert capsys.readouterr().out == "FAIL: group advantages — not implemented yet\n"


def test_check_turns_a_wrong_answer_into_an_assertion_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def wrong() -> None:
        assert 2 + 2 == 5, "2 + 2 should be 5 in this test"

    with pytest.raises(AssertionError, match="^sums: 2 \\+ 2 should be 5 in this test$"):
        check("sums", wrong)
    assert capsys.readouterr().out == "FAIL: sums — 2 + 2 should be 5 in this test\n"

    # Defined like a notebook cell (IPython registers cell sources in linecache), so pytest's assertion
    # rewriting does not change the message.
    cell = "def bare():\n    value = 3\n    assert value == 4\n"
    linecache.cache["<cell 7>"] = (len(cell), None, cell.splitlines(keepends=True), "<cell 7>")
    namespace: dict = {}
    exec(compile(cell, "<cell 7>", "exec"), namespace)
    bare = namespace["bare"]

    with pytest.raises(AssertionError):
        check("bare assert", bare)
    assert capsys.readouterr().out == "FAIL: bare assert — assertion failed: assert value == 4\n"

    def crashes() -> None:
        raise ValueError("shapes (2,) and (3,) differ")

    with pytest.raises(AssertionError, match="crash: ValueError: shapes"):
        check("crash", crashes)
    assert capsys.readouterr().out == "FAIL: crash — ValueError: shapes (2,) and (3,) differ\n"


def test_check_without_raising_returns_false(capsys: pytest.CaptureFixture[str]) -> None:
    def stub() -> None:
        raise NotImplementedError

    assert check("soft", stub, raise_on_fail=False) is False
    assert capsys.readouterr().out == "FAIL: soft — not implemented yet\n"
    with pytest.raises(ValueError, match="one non-empty line"):
        check("two\nlines", stub)


def test_check_outcomes_reads_pass_and_fail_lines() -> None:
    nb = _notebook("check('a', f)", "check('b — c', g)", "print('PASS: no')")
    nb.cells[2].outputs = [new_output("stream", name="stdout", text="PASS: a\n")]
    nb.cells[3].outputs = [
        new_output("stream", name="stdout", text="FAIL: b — c — not implemented yet\n"),
        new_output("error", ename="NotImplementedError", evalue="", traceback=[]),
    ]
    nb.cells[4].outputs = [
        new_output("stream", name="stdout", text="  PASS: indented lines are not checks\n")
    ]
    assert check_outcomes(nb) == {"a": True, "b": False}


def test_strip_outputs_cleans_in_place_once(tmp_path: Path) -> None:
    path = _write(tmp_path / "nb.ipynb", _notebook("print(1)"))
    before = path.read_text()
    assert strip_outputs(path, dry_run=True) is True and path.read_text() == before
    assert strip_outputs(path) is True
    cells = nbformat.read(path, as_version=4).cells
    assert all(c.outputs == [] and c.execution_count is None for c in cells if c.cell_type == "code")
    assert strip_outputs(path) is False


def test_cli_exercises_check_and_strip_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    _write(solutions / "01_a.ipynb", _notebook(METHOD_SOURCE))
    args = ["--solutions", str(solutions), "--exercises", str(exercises)]
    assert main(["exercises", "--check", *args]) == 1
    assert "stale:" in capsys.readouterr().out
    assert main(["exercises", *args]) == 0
    assert main(["exercises", "--check", *args]) == 0
    assert main(["strip", "--check", str(solutions)]) == 1, "a folder: the notebooks in it"
    assert main(["strip", "--check", str(solutions / "01_a.ipynb")]) == 1
    assert main(["strip", str(solutions / "01_a.ipynb")]) == 0
    assert main(["strip", "--check", str(solutions)]) == 0
    assert main(["strip", "--check", str(solutions / "01_a.ipynb")]) == 0


def test_a_whole_course_run_is_recorded_as_a_results_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from agentrl_lite.course.budgets import BUDGET_S
    from agentrl_lite.course.course_runs import record_course_run

    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path / "results"))

    def run(name: str, command: str, notebooks: list[dict], device: str | None = None) -> Path:
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        summary = {"profile": "cpu", "command": command, "notebooks": notebooks}
        machine = {} if device is None else {"device": device, "bf16": True}  # a run since 2026-11-29 records both
        (run_dir / "runs.json").write_text(json.dumps({**summary, **machine}))
        return run_dir

    monkeypatch.setattr("agentrl_lite.course.course_runs.device_name", lambda: "Machine A (2 cores)")
    monkeypatch.setattr("agentrl_lite.course.results.device_name", lambda: "Machine A (2 cores)")

    whole = run("20260101T000000Z", "make course PROFILE=cpu",
                [{"notebook": "00_a.ipynb", "status": "ok", "seconds": 100.0},
                 {"notebook": "01_b.ipynb", "status": "ok", "seconds": BUDGET_S["cpu"] + 1.0},
                 {"notebook": "02_c.ipynb", "status": "failed", "seconds": 5.0}])
    path = record_course_run(whole)
    record = json.loads(path.read_text())
    assert path == tmp_path / "results" / "bench" / "course_cpu.json"
    assert record["command"] == "make course PROFILE=cpu" and record["profile"] == "cpu"
    metrics = record["metrics"]
    assert metrics["notebooks"]["01_b.ipynb"]["seconds"] == BUDGET_S["cpu"] + 1.0
    assert metrics["total_seconds"] == pytest.approx(105.0 + BUDGET_S["cpu"] + 1.0)
    assert metrics["over_budget"] == ["01_b.ipynb"] and metrics["failed"] == ["02_c.ipynb"]
    # a later rerun of one lesson replaces that lesson's entry and says where it comes from
    # (on another machine: each notebook records its own, and the file names both)
    rerun = run("20260102T000000Z", "make course PROFILE=cpu LESSON=01",
                [{"notebook": "01_b.ipynb", "status": "ok", "seconds": 900.0}], device="Machine B (2 cores)")
    record = json.loads(record_course_run(whole, rerun).read_text())
    metrics = record["metrics"]
    assert metrics["notebooks"]["01_b.ipynb"] == {"status": "ok", "seconds": 900.0, "peak_rss_mb": None,
                                                  "run_dir": "20260102T000000Z",
                                                  "command": "make course PROFILE=cpu LESSON=01",
                                                  "device": "Machine B (2 cores)", "bf16": True}
    assert metrics["notebooks"]["00_a.ipynb"]["device"] == "Machine A (2 cores)"  # a runs.json without one: here
    assert "bf16" not in metrics["notebooks"]["00_a.ipynb"], "an older run does not say: nothing is guessed"
    assert record["device"] == "Machine A (2 cores) and Machine B (2 cores)"
    assert metrics["over_budget"] == [] and metrics["notebooks"]["00_a.ipynb"]["run_dir"] == "20260101T000000Z"
    # one seed of a later `reproduce` run, onto the committed file whose run folders are gone
    (tmp_path / "runs" / "20260101T000000Z" / "runs.json").unlink()
    seed = run("20260103T000000Z/seed_1", "make reproduce LESSON=02  # seed 1",
               [{"notebook": "02_c.ipynb", "status": "ok", "seconds": 50.0, "peak_rss_mb": 3000.0}])
    record = json.loads(record_course_run(seed, onto_committed=True).read_text())
    assert record["command"] == "make course PROFILE=cpu && make course PROFILE=cpu LESSON=01 && make reproduce LESSON=02  # seed 1"
    metrics = record["metrics"]
    assert metrics["notebooks"]["02_c.ipynb"]["run_dir"] == "20260103T000000Z/seed_1" and metrics["failed"] == []
    assert metrics["notebooks"]["01_b.ipynb"]["seconds"] == 900.0, "the other lessons keep their measured rows"
    assert metrics["run_dirs"] == ["20260101T000000Z", "20260102T000000Z", "20260103T000000Z/seed_1"]
    assert metrics["total_seconds"] == pytest.approx(100.0 + 900.0 + 50.0)


def test_a_lesson_measured_on_both_kinds_of_machine_keeps_a_row_of_each(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A bf16 machine runs a lesson 2-3x faster than one without: its row must not hide the slower one."""
    import json

    from agentrl_lite.course.budgets import BUDGET_S
    from agentrl_lite.course.course_runs import record_course_run
    from agentrl_lite.course.docs import render_course_cpu

    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path / "results"))

    def run(name: str, seconds: float, bf16: bool, peak: float) -> Path:
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        (run_dir / "runs.json").write_text(json.dumps({
            "profile": "cpu", "command": f"run {name}", "device": f"Xeon {'AMX' if bf16 else 'plain'} (2 cores)",
            "bf16": bf16, "notebooks": [{"notebook": "09_s.ipynb", "status": "ok", "seconds": seconds,
                                         "peak_rss_mb": peak}]}))
        return run_dir

    slow, fast = run("a", BUDGET_S["cpu"] * 2, False, 3600.0), run("b", BUDGET_S["cpu"] / 2, True, 3800.0)
    metrics = json.loads(record_course_run(slow, fast).read_text())["metrics"]
    row = metrics["notebooks"]["09_s.ipynb"]
    assert row["run_dir"] == "b" and row["other_machine"]["run_dir"] == "a" and row["other_machine"]["bf16"] is False
    assert "other_machine" not in row["other_machine"]
    assert metrics["over_budget"] == ["09_s.ipynb"], "over on the machine without bf16"
    assert metrics["total_seconds"] == BUDGET_S["cpu"] / 2
    assert metrics["total_seconds_slower_machine"] == BUDGET_S["cpu"] * 2
    # a later run on the same kind replaces that kind's row and keeps the other
    again = run("c", BUDGET_S["cpu"] / 3, True, 3700.0)
    row = json.loads(record_course_run(slow, fast, again).read_text())["metrics"]["notebooks"]["09_s.ipynb"]
    assert row["run_dir"] == "c" and row["other_machine"]["run_dir"] == "a"
    # ... and a run on the other kind again swaps them
    row = json.loads(record_course_run(slow, fast, again, run("d", 1000.0, False, 3500.0)).read_text()
                     )["metrics"]["notebooks"]["09_s.ipynb"]
    assert (row["run_dir"], row["other_machine"]["run_dir"]) == ("d", "c")
    # a row that does not say whether its machine ran bf16 replaces without keeping anything
    old = tmp_path / "runs" / "e"
    old.mkdir()
    (old / "runs.json").write_text(json.dumps({"profile": "cpu", "command": "e", "notebooks": [
        {"notebook": "09_s.ipynb", "status": "ok", "seconds": 10.0}]}))
    assert "other_machine" not in json.loads(record_course_run(slow, old).read_text())["metrics"]["notebooks"]["09_s.ipynb"]

    results = json.loads(record_course_run(slow, fast).read_text())
    text = render_course_cpu(results)
    assert "| 09_s | 10.0 min | yes | 3.7 GB | Xeon AMX (2 cores), bf16 | `runs/b` |" in text
    assert "| 09_s | 40.0 min | **no** | 3.5 GB | Xeon plain (2 cores), fp32 | `runs/a` |" in text
    assert "| **all lessons** | **10 min** (each lesson on its slower machine: 40 min) |" in text
    assert "heaviest is 09_s at 3.7 GB" in text, "the heavier of the two rows"


def test_readme_marks_a_lesson_done_only_by_its_written_rule():
    """README's status rule, recomputed here from the files: ✅ needs no learning claim (00, 02) or a claim measured
    over ≥3 seeds in its own file (01, 03) or a primary claim that holds over ≥5 seeds; and the rendered table agrees with `docs.lesson_status` for every lesson."""
    import re

    from agentrl_lite.course.docs import lesson_status
    from agentrl_lite.course.reproduce import primary_claim

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    assert "`agentrl_lite.course.docs.lesson_status`" in readme, "the README names the rule its marks follow"
    rows = dict(re.findall(r"^\| (\d\d) \| \[[^]]+\]\([^)]+\) \| (\S+) \|", readme, flags=re.MULTILINE))
    assert len(rows) == len(list((root / "notebooks").glob("*.ipynb"))), "one row per lesson: the table's format changed?"
    assert rows == {lesson: lesson_status(lesson, root / "results") for lesson in rows}, "README.md is stale"
    done = [lesson for lesson, mark in rows.items() if mark == "✅"]
    assert done, "no lesson marked done"
    for lesson in done:
        if lesson in ("00", "02"):
            continue
        seeds_files = list((root / "results" / "lessons").glob(f"{lesson}_*_seeds.json"))
        own = [json.loads(p.read_text()) for p in (root / "results" / "lessons").glob(f"{lesson}_*.json") if p not in seeds_files]
        multi = any(len(r.get("metrics", {}).get("seeds", [])) >= 3 for r in own)
        primaries = [primary_claim(json.loads(p.read_text())["metrics"]) for p in seeds_files]
        holds = any(c and c["role"] == "primary" and len(c["difference_per_seed"]) >= 5
                    and c["verdict"] == c["expected"] for c in primaries)
        assert multi or holds, f"lesson {lesson} is marked ✅ without a ≥3-seed result or a primary claim that holds"


def test_the_readme_states_the_ram_lessons_need_from_measured_peaks():
    from agentrl_lite.course.docs import memory_statement

    text = memory_statement({"04_a.ipynb": {"peak_rss_mb": 3900.0}, "05_b.ipynb": {"peak_rss_mb": 4300.0},
                             "06_c.ipynb": {"peak_rss_mb": None}})
    assert "budget of 4 GB" in text and "smoke profile runs on a machine with 8 GB of RAM" in text
    assert "heaviest is 05_b at 4.2 GB" in text and "over the budget: 05_b." in text
    assert "cpu profile needs 8 GB" in text, "4.2 GB + 2 GB fits 8 GB"
    heavy = memory_statement({"06_c.ipynb": {"peak_rss_mb": 10.2 * 1024}})
    assert "cpu profile needs 16 GB" in heavy, "a 10.2 GB lesson does not fit an 8 or 12 GB machine beside the system"
    assert "Not measured yet: 06_c." in text
    assert "none is over the budget" in memory_statement({"04_a.ipynb": {"peak_rss_mb": 3900.0}})


def test_a_contended_runtime_is_marked_in_the_readme_table():
    from agentrl_lite.course.docs import render_course_cpu

    row = {"status": "ok", "seconds": 600.0, "peak_rss_mb": 3000.0, "run_dir": "r", "device": "AMD EPYC (2 cores)"}
    results = {"command": "make course", "date": "2026-11-27", "device": "AMD EPYC (2 cores)",
               "metrics": {"budget_seconds_per_notebook": 1200, "total_seconds": 1200.0,
                           "notebooks": {"01_a.ipynb": row, "02_b.ipynb": {**row, "contended": "a probe ran beside it"}}}}
    text = render_course_cpu(results)
    assert "| 01_a | 10.0 min |" in text and "| 02_b | 10.0 min (contended) |" in text
    assert "Contended runs (their runtime is too long): 02_b: a probe ran beside it." in text
    assert "| AMD EPYC (2 cores) | `runs/r` |" in text, "a row that does not say whether its machine ran bf16"
    results["metrics"]["notebooks"]["01_a.ipynb"] = {**row, "bf16": True}
    results["metrics"]["notebooks"]["02_b.ipynb"] = {**row, "bf16": False, "device": "Intel Xeon (2 cores)"}
    text = render_course_cpu(results)
    assert "| AMD EPYC (2 cores), bf16 | `runs/r` |" in text and "| Intel Xeon (2 cores), fp32 | `runs/r` |" in text


def test_every_lesson_with_a_design_page_links_to_it_and_every_link_resolves():
    """Design decisions live in docs/design/, not in the lessons: each lesson with a page names it, and every
    docs/design path a lesson, the library or the docs name exists."""
    import re

    root = Path(__file__).resolve().parents[1]
    for page in (root / "docs" / "design").glob("[0-9][0-9]_*.md"):
        lesson = root / "notebooks" / f"{page.stem}.ipynb"
        assert lesson.exists(), f"{page.name} names no lesson"
        assert f"docs/design/{page.name}" in lesson.read_text(), f"{lesson.name} does not link {page.name}"
    texts = [*root.glob("notebooks/*.ipynb"), *(root / "agentrl_lite").rglob("*.py"), root / "README.md",
             *(root / "docs").rglob("*.md")]
    named = {m for path in texts for m in re.findall(r"docs/design/[\w.]+\.md", path.read_text())}
    assert named and not [n for n in named if not (root / n).exists()]


def test_a_side_study_with_its_own_seeds_does_not_mark_a_lesson_done(tmp_path):
    """A lesson is ✅ by its own results file's seeds, never by a side study's (lesson 06's cold-start study holds
    five seeds of SFT alone, not of the lesson's claim)."""
    import json

    from agentrl_lite.course.docs import lesson_status

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "06_multi_turn_agentic_grpo.ipynb").write_text("{}")
    lessons = tmp_path / "results" / "lessons"
    lessons.mkdir(parents=True)
    (lessons / "06_agentic_grpo.json").write_text(json.dumps({"metrics": {"heldout": {}}}))
    (lessons / "06_cold_start_study.json").write_text(json.dumps({"metrics": {"seeds": [0, 1, 2, 3, 4]}}))
    assert lesson_status("06", tmp_path / "results") == "🟡"
    (lessons / "06_agentic_grpo.json").write_text(json.dumps({"metrics": {"seeds": [0, 1, 2]}}))
    assert lesson_status("06", tmp_path / "results") == "✅", "the lesson's own file with three seeds still counts"


def test_a_cells_memory_peak_never_takes_samples_from_the_next_cell():
    from datetime import UTC, datetime

    import nbformat

    from agentrl_lite.course.runner import RSS_EVERY_S, _cell_peaks

    def cell(start: float, end: float) -> nbformat.NotebookNode:
        times = {"start_time": datetime.fromtimestamp(start, tz=UTC).isoformat(),
                 "end_time": datetime.fromtimestamp(end, tz=UTC).isoformat()}
        return nbformat.v4.new_code_cell("", metadata={"papermill": times})

    nb = nbformat.v4.new_notebook(cells=[cell(100.0, 100.01), cell(100.02, 102.0)])  # a fast cell, then a heavy one
    samples = [(100.005, 300.0), (100.03, 900.0), (101.0, 900.0), (102.0 + RSS_EVERY_S / 2, 310.0)]
    assert _cell_peaks(nb, samples) == {0: 300.0, 1: 900.0}
    # the last cell keeps its interval of grace: a sample just after it ends is still its own
    assert _cell_peaks(nbformat.v4.new_notebook(cells=[cell(100.0, 100.01)]), [(100.01 + RSS_EVERY_S / 2, 50.0)]) == {0: 50.0}
