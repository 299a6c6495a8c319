"""Exercises (course tooling): exercise notebooks generated from solutions, and the check cells that grade them.

One source of truth. A solution notebook marks each answer with two comment lines, indented like the code:

    def group_advantages(rewards, group_size):
        # BEGIN SOLUTION: normalise each reward within its group
        grouped = rewards.view(-1, group_size)
        ...
        # END SOLUTION

`make_exercise` replaces the region by `raise NotImplementedError("Exercise: <hint>")` at the same
indentation (hint after `BEGIN SOLUTION:`, default "your code here"), replaces each markdown cell tagged
`model-answer` (the solution's answer to a written question) by a prompt to write one, and strips all outputs;
`build_exercises` writes `exercises/NN_name.ipynb` for every `solutions/NN_name.ipynb`, byte for byte the
same on every run, so `agentrl-lite exercises --check` can tell exactly when an exercise is stale.
Put regions inside function bodies: the exercise notebook then still defines every name, and only the
cells that call the stub stop.

A check cell follows each task:

    def test_group_advantages():
        adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2)
        assert torch.allclose(adv, torch.tensor([0.7071, -0.7071, -0.7071, 0.7071]), atol=1e-4), f"got {adv}"

    check("group advantages", test_group_advantages)

It prints `PASS: group advantages` when the asserts hold, else `FAIL: group advantages — <reason>` and
raises, so the cell shows as an error (NotImplementedError while the stub is still there).

A decision lab asks the learner to choose (a reward, a weight, a budget) and its check measures the outcome. The
solution records, inside its region, the plausible wrong choices the check must refuse, commented out:

    def choose_omega(found):
        # BEGIN SOLUTION: a weight whose verdicts hold a gain and no loss
        return next((omega for omega, v in found.items() if ...), 0.0)
        # BEGIN WRONG: the largest weight tried
        # return max(found)
        # END WRONG
        # END SOLUTION

The exercise drops them with the region. `with_wrong_decisions` appends to a solution a replay of each: the cells
from the decision to its check, with the region holding the wrong code instead; the tests run it and require that
check to FAIL, so CI proves the check tells the right decision from a wrong one, not only from the stub.
"""

from __future__ import annotations

import copy
import json
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nbformat loads jsonschema's format checkers (about 2 s): only the tools that build or
    import nbformat  # read notebooks import it, never the `check` a notebook calls

BEGIN_RE = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION(?::[ \t]*(?P<hint>.*?))?[ \t]*$")
END_RE = re.compile(r"^(?P<indent>[ \t]*)# END SOLUTION[ \t]*$")
DEFAULT_HINT = "your code here"
STUB_MARK = 'raise NotImplementedError("Exercise: '
"""Every stub line the generator writes contains this; the runner uses it to recognise stub cells."""
CHECK_CALL_RE = re.compile(r"\bcheck\(")
"""A cell whose source calls `check(` is a check cell."""
CHECK_LINE_RE = re.compile(r"^(?:PASS: (?P<passed>.+?)|FAIL: (?P<failed>.+?) — .*)$", re.MULTILINE)
WRONG_BEGIN_RE = re.compile(r"^(?P<indent>[ \t]*)# BEGIN WRONG:[ \t]*(?P<why>\S.*?)[ \t]*$")
WRONG_END_RE = re.compile(r"^[ \t]*# END WRONG[ \t]*$")
MODEL_ANSWER_TAG = "model-answer"
"""Tag of a solution's markdown cell answering a written question; the exercise holds `ANSWER_PROMPT` instead."""
ANSWER_PROMPT = "**Your answer.** *(Double-click to write it here; the solution notebook holds a model answer.)*"
WRONG_TAG = "wrong-decision"
"""Tag of the cells `with_wrong_decisions` appends (the replays of wrong decisions)."""
GENERATED_KEY = "agentrl_lite"
"""Notebook metadata key under which an exercise records the solution it was generated from."""


# --- exercises from solutions ----------------------------------------------------------------------------


def _regions(lines: list[str], where: str) -> list[tuple[int, int, re.Match]]:
    """(first line, last line, the BEGIN line's match) of every solution region of a cell's lines, 0-based; a
    ValueError naming the line when regions nest or are unbalanced."""
    regions, open_at = [], None
    for n, line in enumerate(lines):
        begin, end = BEGIN_RE.match(line), END_RE.match(line)
        if begin:
            if open_at is not None:
                raise ValueError(
                    f"{where}, line {n + 1}: '# BEGIN SOLUTION' inside the region opened at line {open_at[0] + 1}; "
                    "close it with '# END SOLUTION' first (regions do not nest)"
                )
            open_at = (n, begin)
        elif end:
            if open_at is None:
                raise ValueError(f"{where}, line {n + 1}: '# END SOLUTION' without a '# BEGIN SOLUTION' above it")
            regions.append((open_at[0], n, open_at[1]))
            open_at = None
    if open_at is not None:
        raise ValueError(f"{where}, line {open_at[0] + 1}: '# BEGIN SOLUTION' is never closed by '# END SOLUTION'")
    return regions


def _stub_source(source: str, where: str) -> str:
    """Replace every solution region in one cell's source by a NotImplementedError stub."""
    lines = source.split("\n")
    out, at = [], 0
    for first, last, begin in _regions(lines, where):
        hint = json.dumps("Exercise: " + (begin.group("hint") or DEFAULT_HINT), ensure_ascii=False)
        out += lines[at:first] + [f"{begin.group('indent')}raise NotImplementedError({hint})"]
        at = last + 1
    return "\n".join(out + lines[at:])


def _clean_cell(cell: nbformat.NotebookNode) -> None:
    """Drop what execution adds to a cell: outputs, execution counts, run timestamps."""
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None
    for key in ("execution", "papermill", "ExecuteTime"):
        cell.metadata.pop(key, None)


def _clean_notebook(nb: nbformat.NotebookNode) -> None:
    """Drop outputs and run metadata from every cell, and run state (papermill, widget state) from the notebook."""
    for cell in nb.cells:
        _clean_cell(cell)
    for key in ("papermill", "widgets"):
        nb.metadata.pop(key, None)


def _ensure_cell_ids(nb: nbformat.NotebookNode) -> None:
    """nbformat ≥4.5 requires cell ids; give missing ones a deterministic id (nbformat would pick random ones)."""
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):
        return
    taken = {cell.get("id") for cell in nb.cells}
    for i, cell in enumerate(nb.cells):
        if not cell.get("id"):
            cell.id = next(f"cell-{i}-{n}" for n in range(len(nb.cells) + 1) if f"cell-{i}-{n}" not in taken)
            taken.add(cell.id)


def notebook_text(nb: nbformat.NotebookNode) -> str:
    """The notebook as stored on disk: nbformat's fixed JSON layout plus a trailing newline, so equal
    notebooks are equal bytes."""
    _ensure_cell_ids(nb)
    import nbformat

    text = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def _read(path: str | Path) -> nbformat.NotebookNode:
    import nbformat

    return nbformat.read(str(path), as_version=nbformat.NO_CONVERT)


def make_exercise(
    solution_nb: nbformat.NotebookNode | str | Path, source: str | None = None
) -> nbformat.NotebookNode:
    """The exercise notebook for a solution notebook (a path or a loaded notebook; the input is not modified).

    `source` names the solution in the "generated from" notice and in error messages (default: the path).
    Raises ValueError naming the file and cell when a region is unbalanced.
    """
    if isinstance(solution_nb, str | Path):
        source = source or Path(solution_nb).as_posix()
        solution_nb = _read(solution_nb)
    import nbformat

    source = source or "a solution notebook"
    nb = copy.deepcopy(solution_nb)  # never touch the caller's notebook
    _clean_notebook(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = _stub_source(cell.source, f"{source}: cell {i}")
        elif MODEL_ANSWER_TAG in cell.metadata.get("tags", []):  # the learner writes their own
            cell.source = ANSWER_PROMPT
    notice = nbformat.v4.new_markdown_cell(
        f"> **Exercise notebook.** Generated from `{source}` by `agentrl-lite exercises`; "
        "edit the solution, not this file.\n"
        '> Replace each `raise NotImplementedError("Exercise: …")` with your code; '
        "the check cell after each task prints `PASS` when you are right."
    )
    notice.metadata = {"tags": ["generated-notice"]}
    if (nb.nbformat, nb.nbformat_minor) >= (4, 5):
        notice.id = "generated-notice"
    else:
        notice.pop("id", None)
    nb.cells.insert(0, notice)
    nb.metadata[GENERATED_KEY] = {"generated_from": source}
    return nb


def build_exercises(
    solutions_dir: str | Path = "solutions", exercises_dir: str | Path = "exercises", check: bool = False
) -> list[Path]:
    """Generate `exercises_dir/<name>.ipynb` from every `solutions_dir/<name>.ipynb`.

    Returns the exercise files written. With `check=True` writes nothing and returns the exercise files
    that are stale or missing, plus generated exercises whose solution no longer exists.
    Without `check`, such orphaned generated exercises are deleted (hand-written files are left alone).
    """
    solutions_dir, exercises_dir = Path(solutions_dir), Path(exercises_dir)
    touched: list[Path] = []
    expected: set[Path] = set()
    for solution in sorted(solutions_dir.glob("*.ipynb")):
        exercise = exercises_dir / solution.name
        expected.add(exercise)
        text = notebook_text(make_exercise(solution, source=f"{solutions_dir.name}/{solution.name}"))
        current = exercise.read_text(encoding="utf-8") if exercise.exists() else None
        if current == text:
            continue
        touched.append(exercise)
        if not check:
            exercise.parent.mkdir(parents=True, exist_ok=True)
            exercise.write_text(text, encoding="utf-8", newline="\n")
    for orphan in sorted(exercises_dir.glob("*.ipynb")):
        if orphan not in expected and GENERATED_KEY in _read(orphan).metadata:
            touched.append(orphan)
            if not check:
                orphan.unlink()
    return touched


# --- decision labs: the wrong decisions a check must refuse ----------------------------------------------------


@dataclass(frozen=True)
class WrongDecision:
    """A plausible wrong answer to a decision lab, recorded in the solution, and the cells that replay it."""

    why: str
    """what the wrong decision is, from its `# BEGIN WRONG: <why>` line"""
    decision_cell: int
    """the code cell holding the solution region it replaces"""
    check_cell: int
    """the first check cell at or after `decision_cell`: the check that must FAIL"""
    sources: tuple[str, ...]
    """the code cells from `decision_cell` to `check_cell`, the region holding the wrong code instead"""


def _uncomment(line: str, indent: str, where: str) -> str:
    if not line.startswith(indent + "#"):
        raise ValueError(f"{where}: every line of a wrong decision must be commented out at its indent: {line!r}")
    rest = line[len(indent) + 1:]
    return indent + (rest[1:] if rest.startswith(" ") else rest) if rest.strip() else ""


def _wrong_variants(source: str, where: str) -> list[tuple[str, str]]:
    """(why, source with that wrong decision in place of its solution region) for each WRONG block of a cell."""
    lines = source.split("\n")
    regions = _regions(lines, where)
    variants, open_block = [], None  # open_block: (line, why, indent) of the BEGIN WRONG line
    for n, line in enumerate(lines):
        if m := WRONG_BEGIN_RE.match(line):
            if open_block is not None:
                raise ValueError(f"{where}, line {n + 1}: '# BEGIN WRONG' inside another; close it first")
            open_block = (n, m.group("why"), m.group("indent"))
        elif WRONG_END_RE.match(line):
            if open_block is None:
                raise ValueError(f"{where}, line {n + 1}: '# END WRONG' without a '# BEGIN WRONG' above it")
            begin, why, indent = open_block
            region = next(((first, last) for first, last, _ in regions if first < begin and n < last), None)
            if region is None:
                raise ValueError(f"{where}, line {begin + 1}: a wrong decision outside a solution region would show "
                                 "in the exercise; put it inside '# BEGIN SOLUTION' ... '# END SOLUTION'")
            wrong = [_uncomment(text, indent, f"{where}, line {begin + 2 + k}") for k, text in enumerate(lines[begin + 1:n])]
            if not any(text.strip() for text in wrong):
                raise ValueError(f"{where}, line {begin + 1}: the wrong decision '{why}' holds no code")
            variants.append((why, "\n".join(lines[: region[0] + 1] + wrong + lines[region[1]:])))
            open_block = None
    if open_block is not None:
        raise ValueError(f"{where}, line {open_block[0] + 1}: '# BEGIN WRONG' is never closed by '# END WRONG'")
    return variants


def wrong_decisions(nb: nbformat.NotebookNode, source: str = "a solution notebook") -> list[WrongDecision]:
    """Every wrong decision a solution notebook records, with the cells that replay it up to its check.

    Raises ValueError when a WRONG block is unbalanced, outside a solution region, not commented out, or has no
    check cell at or after it."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for why, variant in _wrong_variants(cell.source, f"{source}: cell {i}"):
            check_cell = next((j for j in range(i, len(nb.cells)) if is_check_cell(nb.cells[j])), None)
            if check_cell is None:
                raise ValueError(f"{source}: cell {i}: no check cell after the wrong decision '{why}'")
            sources = [variant] + [c.source for c in nb.cells[i + 1: check_cell + 1] if c.cell_type == "code"]
            found.append(WrongDecision(why, i, check_cell, tuple(sources)))
    return found


def with_wrong_decisions(
    nb: nbformat.NotebookNode, source: str = "a solution notebook"
) -> tuple[nbformat.NotebookNode, list[WrongDecision]]:
    """A copy of a solution notebook that, after its own cells, replays each wrong decision it records (cells
    tagged `WRONG_TAG`; the last of each replay is the check that must FAIL). Run it with errors allowed."""
    import nbformat

    out = copy.deepcopy(nb)
    found = wrong_decisions(nb, source)
    for k, wrong in enumerate(found):
        for n, text in enumerate(wrong.sources):
            cell = nbformat.v4.new_code_cell(text, metadata={"tags": [WRONG_TAG], WRONG_TAG: wrong.why})
            cell.id = f"wrong-{k}-{n}"
            out.cells.append(cell)
    return out, found


def wrong_decision_outcomes(executed: nbformat.NotebookNode) -> dict[str, tuple[bool | None, str | None]]:
    """For an executed `with_wrong_decisions` notebook: why → (its check's outcome: True PASS, False FAIL, None
    when no check line was printed; the name of the error the replay's last cell raised, or None)."""
    replays: dict[str, list[nbformat.NotebookNode]] = {}
    for cell in executed.cells:
        if WRONG_TAG in cell.get("metadata", {}).get("tags", []):
            replays.setdefault(cell.metadata[WRONG_TAG], []).append(cell)
    outcomes = {}
    for why, cells in replays.items():
        last = cells[-1]
        checks = [m.group("passed") is not None for m in CHECK_LINE_RE.finditer(cell_stdout(last))]
        errors = [out.ename for out in last.get("outputs", []) if out.output_type == "error"]
        outcomes[why] = (checks[0] if checks else None, errors[0] if errors else None)
    return outcomes


def strip_outputs(path: str | Path, dry_run: bool = False) -> bool:
    """Store a notebook without outputs, with null execution counts and no run metadata, in nbformat's
    fixed layout. Returns True when the file changed (with `dry_run`: would change; nothing is written)."""
    path = Path(path)
    before = path.read_text(encoding="utf-8")
    import nbformat

    nb = nbformat.reads(before, as_version=nbformat.NO_CONVERT)
    _clean_notebook(nb)
    after = notebook_text(nb)
    if after != before and not dry_run:
        path.write_text(after, encoding="utf-8", newline="\n")
    return after != before


# --- check cells --------------------------------------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    """One line telling the learner why a check failed."""
    if isinstance(exc, NotImplementedError):
        return "not implemented yet"
    if isinstance(exc, AssertionError):
        if str(exc):
            return str(exc).splitlines()[0]
        frames = traceback.extract_tb(exc.__traceback__)
        line = frames[-1].line if frames else ""
        return f"assertion failed: {line}" if line else "assertion failed"
    first_line = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


def check(name: str, fn: Callable[[], None], *, raise_on_fail: bool = True) -> bool:
    """Run one exercise check and print exactly one line: `PASS: <name>` or `FAIL: <name> — <reason>`.

    `fn` holds the asserts that call the learner's code. Returns True on success. On failure:
    - a NotImplementedError (the stub is still there) is re-raised unchanged, so in an exercise notebook the
      check cell errors with ename NotImplementedError and nothing after it pretends to work;
    - an AssertionError or any other exception becomes `AssertionError("<name>: <reason>")`, so a wrong
      answer reads as a failed check, not as a crash inside the library;
    - with `raise_on_fail=False` nothing is raised and False is returned (to grade several checks in a loop).
    """
    if not name or "\n" in name or " — " in name:
        raise ValueError(f"A check's name must be one non-empty line without ' — ' (got {name!r})")
    try:
        fn()
    except Exception as exc:
        print(f"FAIL: {name} — {_reason(exc)}", flush=True)
        if not raise_on_fail:
            return False
        if isinstance(exc, NotImplementedError):
            raise
        raise AssertionError(f"{name}: {_reason(exc)}") from exc
    print(f"PASS: {name}", flush=True)
    return True


def check_outcomes(nb: nbformat.NotebookNode) -> dict[str, bool]:
    """Every check an executed notebook ran: name → True (PASS) / False (FAIL), read from stream outputs."""
    outcomes: dict[str, bool] = {}
    for cell in nb.cells:
        for match in CHECK_LINE_RE.finditer(cell_stdout(cell)):
            if match.group("passed") is not None:
                outcomes[match.group("passed")] = outcomes.get(match.group("passed"), True)
            else:
                outcomes[match.group("failed")] = False
    return outcomes


def cell_stdout(cell: nbformat.NotebookNode) -> str:
    """The text a code cell printed to stdout (empty for other cells)."""
    if cell.cell_type != "code":
        return ""
    return "".join(
        "".join(out.text) if isinstance(out.text, list) else out.text
        for out in cell.get("outputs", [])
        if out.output_type == "stream" and out.name == "stdout"
    )


def is_check_cell(cell: nbformat.NotebookNode) -> bool:
    """A code cell that calls `check(`."""
    return cell.cell_type == "code" and bool(CHECK_CALL_RE.search(cell.source))


def is_stub_cell(cell: nbformat.NotebookNode) -> bool:
    """A code cell holding at least one generated NotImplementedError stub."""
    return cell.cell_type == "code" and STUB_MARK in cell.source
