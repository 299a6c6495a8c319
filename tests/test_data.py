"""data/ is reproducible from the generators, and its answers are right."""

import pytest

from agentrl_lite.course.data import build_all
from agentrl_lite.tasks import DATA_DIR, read_jsonl, task_dataset
from agentrl_lite.tools import calculator


def test_regeneration_is_byte_identical(tmp_path):
    for path in build_all(tmp_path):
        committed = DATA_DIR / path.name
        assert committed.exists(), f"{committed} missing: run `python -m agentrl_lite data`"
        assert path.read_bytes() == committed.read_bytes(), f"{path.name} is stale: regenerate data/"


def test_heldout_is_disjoint_from_train():
    train = {t["question"] for t in read_jsonl(DATA_DIR / "arithmetic_train.jsonl")}
    heldout = {t["question"] for t in read_jsonl(DATA_DIR / "arithmetic_heldout.jsonl")}
    assert heldout and not (train & heldout)


def test_gold_answers_agree_with_the_calculator():
    for task in read_jsonl(DATA_DIR / "arithmetic_heldout.jsonl"):
        assert calculator(task["expression"]) == task["answer"], task


def test_task_files_load_as_datasets_with_the_same_rows():
    ds = task_dataset("word_problems_heldout")
    assert [dict(row) for row in ds] == read_jsonl(DATA_DIR / "word_problems_heldout.jsonl")  # lists survive too
    assert [row["id"] for row in ds.select(range(3))] == [row["id"] for row in read_jsonl(
        DATA_DIR / "word_problems_heldout.jsonl")[:3]]
    with pytest.raises(ValueError, match="gold_calls"):  # records of varying shape would be padded with None
        task_dataset("toolcall_heldout")
    with pytest.raises(FileNotFoundError, match="agentrl-lite data"):
        task_dataset("no_such_file")


def test_small_arithmetic_split_is_disjoint_complete_and_right():
    from agentrl_lite.tasks.arithmetic import commutative_key

    train = read_jsonl(DATA_DIR / "small_arithmetic_train.jsonl")
    validation = read_jsonl(DATA_DIR / "small_arithmetic_validation.jsonl")
    heldout = read_jsonl(DATA_DIR / "small_arithmetic_heldout.jsonl")
    questions = [t["question"] for t in train + validation + heldout]
    assert len(questions) == len(set(questions)) == 19 * 8 + 11 * 8 + 8 * 8  # every a op b once
    assert (len(validation), len(heldout)) == (38, 76)
    keys = [{commutative_key(t["expression"]) for t in split} for split in (train, validation, heldout)]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2]), "a commutative twin crosses splits"
    assert commutative_key("8 + 5") == commutative_key("5 + 8") != commutative_key("13 - 5")
    for task in train + validation + heldout:
        assert calculator(task["expression"]) == task["answer"], task


def test_identity_questions_are_distinct_disjoint_and_right():
    train = read_jsonl(DATA_DIR / "identity_arithmetic_train.jsonl")
    heldout = read_jsonl(DATA_DIR / "identity_arithmetic_heldout.jsonl")
    questions = [t["question"] for t in train + heldout]
    assert (len(train), len(heldout)) == (256, 128) and len(questions) == len(set(questions))
    for task in train + heldout:
        assert calculator(task["expression"]) == task["answer"], task
        assert task["answer"] in task["expression"].split(), task  # the answer is written in the question


@pytest.mark.parametrize("family,others", [
    ("arithmetic", ("train", "heldout", "sft")),
    ("small_arithmetic", ("train", "heldout")),
    ("identity_arithmetic", ("train", "heldout")),
    ("toolcall", ("train", "heldout", "sft")),
    ("word_problems", ("train", "heldout", "sft")),
    ("search", ("train", "heldout")),
    ("sql", ("train", "heldout", "sft")),
])
def test_every_rl_task_family_has_a_disjoint_validation_split(family, others):
    """Tuning probes read `<family>_validation.jsonl`; it shares no question with any other split."""
    def questions(split):
        rows = read_jsonl(DATA_DIR / f"{family}_{split}.jsonl")
        return {r.get("question") or r["messages"][0]["content"] for r in rows}

    validation = questions("validation")
    assert len(validation) >= 38
    for split in others:
        assert not validation & questions(split), f"{family}: validation overlaps {split}"


def _two_step(rows):
    return [r for r in rows if len(r["steps"]) <= 2]


@pytest.mark.parametrize("family,retired,scored", [
    # family, its retired held-out set (probes looked at it), the part of the held-out file its lessons score
    ("word_problems", "agentrl_lite.tasks.word_problems:retired_heldout", _two_step),  # lessons 06 and 08
    ("toolcall", "agentrl_lite.tasks.function_calls:retired_heldout", list),  # lesson 05
    # lesson 07 scores half its questions from each of these two
    ("arithmetic", "agentrl_lite.tasks.arithmetic:retired_arithmetic_heldout", list),
    ("identity_arithmetic", "agentrl_lite.tasks.arithmetic:retired_identity_heldout", list),
    ("search", "agentrl_lite.tasks.search:retired_heldout", list),  # lesson 09: a world of its own
])
def test_renewed_heldout_sets_are_new_large_and_disjoint(family, retired, scored):
    """A renewed held-out set shares no question and no id with the held-out set it replaced, nor with any
    split used for training or choices, and its lessons score at least 100 of its items."""
    import importlib

    module, name = retired.split(":")
    old = getattr(importlib.import_module(module), name)()
    heldout = read_jsonl(DATA_DIR / f"{family}_heldout.jsonl")
    assert len(scored(heldout)) >= 100
    assert not {r["id"] for r in heldout} & {r["id"] for r in old}
    questions = {r["question"] for r in heldout}
    assert not questions & {r["question"] for r in old}, "the new held-out set repeats a retired item"
    for split in ("train", "validation", "sft"):
        if not (DATA_DIR / f"{family}_{split}.jsonl").exists():
            continue  # a family without demonstrations
        rows = read_jsonl(DATA_DIR / f"{family}_{split}.jsonl")
        assert not questions & {r.get("question") or r["messages"][0]["content"] for r in rows}, split
