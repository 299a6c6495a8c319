"""Every lesson's profiles are consistent with the data, checked without a GPU: the gpu profile's parameters were
once found wrong only on a lent machine (more held-out questions asked for than exist). Each notebook's BUDGET
table is read from its source; every profile must define the same keys, and what a profile asks of a task file
must exist in it, in both splits a lesson can score (held-out, and validation for tuning runs)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.word_problems import COLD_START_STEPS

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def budget(path: Path) -> dict[str, dict]:
    """The notebook's `BUDGET = {profile: dict(...)}[PROFILE]` table, evaluated."""
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or "BUDGET = {" not in cell.source:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "BUDGET"
                    and isinstance(node.value, ast.Subscript) and isinstance(node.value.value, ast.Dict)):
                return eval(compile(ast.Expression(node.value.value), str(path), "eval"),
                            {"dict": dict, "COLD_START_STEPS": COLD_START_STEPS})  # the constants lessons import
    raise AssertionError(f"{path.name} has no BUDGET = {{...}}[PROFILE] table")


def size(name: str, splits=("heldout",)) -> int:
    """The smallest number of rows of data/<name>_<split>.jsonl over the splits a lesson may score."""
    return min(len(read_jsonl(DATA_DIR / f"{name}_{split}.jsonl")) for split in splits)


def splits(path: Path) -> tuple[str, ...]:
    """The splits a lesson can score: held-out, and validation when its parameters cell has a SPLIT to set
    (`make reproduce SET=SPLIT=validation`, the tuning runs)."""
    parameters = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code").source
    return ("heldout", "validation") if "SPLIT" in parameters else ("heldout",)


def per_kind(names) -> int:
    return min(Counter(q["kind"] for q in read_jsonl(DATA_DIR / f"search_{split}.jsonl"))[kind]
               for split in names for kind in ("single_hop", "two_hop", "comparison", "unanswerable"))


LIMITS = {  # lesson -> {budget key: how many items its data holds, given the splits it scores}
    "00": {"n_eval": lambda s: size("arithmetic", s)},
    "01": {"n_heldout": lambda s: size("arithmetic", s),
           "n_demos": lambda s: len(read_jsonl(DATA_DIR / "arithmetic_sft.jsonl"))},
    "02": {"n_tasks": lambda s: size("arithmetic", s)},
    "04": {"n_eval": lambda s: size("small_arithmetic", s)},
    "05": {"n_synthetic": lambda s: size("toolcall", s)},
    "06": {"n_heldout": lambda s: size("word_problems", s)},
    "07": {"n_heldout": lambda s: 2 * min(size("identity_arithmetic", s), size("arithmetic", s))},  # half of each
    "08": {"n_heldout": lambda s: size("word_problems", s)},
    "09": {"per_kind": per_kind},
    "11": {"heldout": lambda s: size("memory", s)},
}
"""None in a budget means "all of them" and always fits"""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_profile_has_the_same_keys_and_asks_only_for_data_that_exists(path):
    table = budget(path)
    assert set(table) == {"smoke", "cpu", "gpu"}, f"{path.name}: profiles {sorted(table)}"
    keys = {profile: set(values) for profile, values in table.items()}
    assert keys["gpu"] == keys["cpu"] == keys["smoke"], f"{path.name}: a profile lacks a key: {keys}"
    for key, holds in LIMITS.get(path.name[:2], {}).items():
        limit = holds(splits(path))
        for profile, values in table.items():
            asked = values[key]
            assert asked is None or asked <= limit, (
                f"{path.name}: the {profile} profile asks for {key}={asked}, the data holds {limit}")
    for profile, values in table.items():
        for key in ("steps", "prompts", "group", "sft_steps"):
            if key in values:
                assert values[key] >= 1, f"{path.name}: {profile} {key}={values[key]}"


def test_a_profile_asking_for_more_than_exists_is_caught(tmp_path):
    """The check above can fail: a copy of lesson 09 whose gpu profile asks for 51 questions of every kind (the
    held-out file has 50)."""
    source = NOTEBOOKS[9]
    assert source.name.startswith("09")
    nb = nbformat.read(source, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "BUDGET = {" in cell.source:
            cell.source = cell.source.replace('"gpu": dict(per_kind=None', '"gpu": dict(per_kind=51')
    copy = tmp_path / source.name
    nbformat.write(nb, copy)
    with pytest.raises(AssertionError, match="per_kind=51"):
        test_every_profile_has_the_same_keys_and_asks_only_for_data_that_exists(copy)
