"""Memory agents: the generated dialogues and questions, the memory bank as a tool, the baseline managers, the
manager environment and the constant-size memory."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentrl_lite.chat import ToolCall, format_tool_call, parse_tool_calls
from agentrl_lite.env import Environment
from agentrl_lite.episode import Episode, Turn
from agentrl_lite.rewards import normalize_answer
from agentrl_lite.tasks.memory import (
    KINDS,
    OPS,
    SPLITS,
    UNKNOWN,
    ConstantMemory,
    MemoryBank,
    MemoryManagerEnv,
    answer_score,
    append_only,
    demonstration,
    gold_answer_in_bank,
    ideal_call,
    last_write_wins,
    manager_tasks,
    memory_dialogues,
    op_confusion,
    oracle,
    read_fact,
)
from agentrl_lite.tools import Toolbox


@pytest.fixture(scope="module")
def dialogues():
    return memory_dialogues(seed=0)


@pytest.fixture(scope="module")
def tasks(dialogues):
    return manager_tasks(dialogues[:30])


def _questions(dialogues, **match):
    return [(d, q) for d in dialogues for q in d["questions"] if all(q[k] == v for k, v in match.items())]


# --- the dialogues ----------------------------------------------------------------------------------------
def test_regeneration_is_deterministic_and_the_seed_matters():
    first = json.dumps(memory_dialogues(seed=3, n=20), sort_keys=True)
    assert json.dumps(memory_dialogues(seed=3, n=20), sort_keys=True) == first
    assert json.dumps(memory_dialogues(seed=4, n=20), sort_keys=True) != first


def test_splits_are_by_dialogue_and_share_no_entity(dialogues):
    assert Counter(d["split"] for d in dialogues) == {"train": 140, "validation": 20, "heldout": 40}
    assert len({d["id"] for d in dialogues}) == len(dialogues)
    names = {split: {n for d in dialogues if d["split"] == split for n in d["people"] + d["organisations"]}
             for split in SPLITS}
    assert not names["train"] & names["heldout"] and not names["train"] & names["validation"]
    assert not names["validation"] & names["heldout"]


def test_dialogues_fit_a_small_context(dialogues):
    for d in dialogues:
        assert 12 <= len(d["turns"]) <= 30, d["id"]
        assert max(len(t["text"].split()) for t in d["turns"]) <= 25, d["id"]
        sessions = [t["session"] for t in d["turns"]]
        assert sessions == sorted(sessions) and sessions[-1] >= 2, d["id"]


def test_every_kind_in_every_split_and_every_event_occurs(dialogues):
    for split in SPLITS:
        assert {q["kind"] for d in dialogues if d["split"] == split for q in d["questions"]} == set(KINDS), split
    events = Counter(t["event"] for d in dialogues for t in d["turns"])
    assert set(events) == {"state", "repeat", "change", "correct", "retract", "chat"}
    forms = {q["form"] for d in dialogues for q in d["questions"]}
    assert forms == {"stated", "chained", "current", "previous", "retracted", "never_stated"}


def test_answers_are_never_in_their_questions_and_unanswerable_means_unknown(dialogues):
    for _, q in _questions(dialogues):
        assert f" {normalize_answer(q['answer'])} " not in f" {normalize_answer(q['question'])} ", q
        assert (q["kind"] == "unanswerable") == (q["answer"] == UNKNOWN), q


def test_the_templates_read_back_every_fact_turn(dialogues):
    """`read_fact` (what the heuristic baseline may use) recognises each turn's event, and only fact turns."""
    for d in dialogues:
        for t in d["turns"]:
            fact = read_fact(t["text"])
            assert (fact["event"] if fact else "chat") == t["event"], t["text"]
            assert fact is None or fact["entity"] in d["people"] + d["organisations"], t["text"]


# --- the baselines: what each bank can answer ------------------------------------------------------------
def test_the_oracle_bank_answers_every_question(dialogues):
    for d, q in _questions(dialogues):
        assert gold_answer_in_bank(oracle(d)[0], q), (d["id"], q)


def test_append_only_keeps_stale_facts_and_last_write_wins_loses_history(dialogues):
    """The point of the lesson: an append-only bank still holds the old and the retracted values; a bank that
    overwrites in place forgets what a value was before. The oracle passes all of these (test above)."""
    def passed(manager, **match):
        cases = _questions(dialogues, **match)
        return sum(gold_answer_in_bank(manager(d)[0], q) for d, q in cases) / len(cases)

    assert passed(append_only, form="current") < 0.2
    assert passed(append_only, form="retracted") < 0.2
    assert passed(last_write_wins, form="previous") == 0.0
    assert passed(last_write_wins, form="current") == 1.0


def test_op_confusion_of_the_baselines(dialogues):
    d = dialogues[0]
    ideal = [t["op"] for t in d["turns"]]
    table = op_confusion(append_only(d)[1], ideal)
    assert table["UPDATE"]["ADD"] == sum(o["op"] == "UPDATE" for o in ideal) > 0
    assert table["DELETE"]["ADD"] == sum(o["op"] == "DELETE" for o in ideal) > 0
    assert all(table[o]["UPDATE"] == table[o]["DELETE"] == 0 for o in OPS)
    assert op_confusion(oracle(d)[1], ideal) == {i: {c: int(c == i) * sum(o["op"] == i for o in ideal)
                                                     for c in (*OPS, "other")} for i in OPS}


def test_answer_score_is_normalised_exact_match_and_f1():
    q = {"answer": "Gruda Bakery"}
    assert answer_score("the gruda bakery.", q) == {"correct": 1.0, "f1": 1.0}
    assert answer_score("Gruda", q) == {"correct": 0.0, "f1": pytest.approx(2 / 3)}


# --- the memory bank ------------------------------------------------------------------------------------
def _bank() -> MemoryBank:
    bank = MemoryBank(capacity=3)
    assert bank.add("Tamo Vesk's home city is Dorim.") == "Added memory 1."
    assert bank.add("Tamo Vesk's pet is called Brix.") == "Added memory 2."
    return bank


def test_bank_operations_and_retrieval():
    bank = MemoryBank()
    assert bank.related("home city") == [] and bank.to_text() == "(no memories)"
    bank = _bank()
    assert bank.related("Where is the home city of Tamo Vesk?", k=1) == [(1, "Tamo Vesk's home city is Dorim.")]
    assert bank.update(1, "Tamo Vesk's home city is Sarn (earlier: Dorim).") == "Updated memory 1."
    assert bank.related("Sarn", k=3) == [(1, "Tamo Vesk's home city is Sarn (earlier: Dorim).")]  # index rebuilt
    assert bank.delete(2) == "Deleted memory 2." and bank.related("pet Brix") == []
    assert bank.add("Osk Press is based in Sarn.") == "Added memory 3."  # ids are never reused
    assert bank.noop() == "Memory unchanged."
    assert bank.to_text() == "[1] Tamo Vesk's home city is Sarn (earlier: Dorim).\n[3] Osk Press is based in Sarn."
    assert MemoryBank.from_state(bank.state()).entries == bank.entries


@pytest.mark.parametrize("operation", [
    lambda b: b.update(7, "Tamo Vesk's job is weaver."),  # unknown id
    lambda b: b.delete(7),
    lambda b: b.update(True, "Tamo Vesk's job is weaver."),  # a boolean is not an id
    lambda b: b.update(1, "   "),  # empty content
    lambda b: b.add(""),
    lambda b: b.add(5),  # not a string
    lambda b: b.add(None),
    lambda b: b.update(1, ["Tamo Vesk"]),
    lambda b: b.add("the a is"),  # nothing BM25 could find
    lambda b: b.add("word " * 40),  # far over the word limit
    lambda b: b.apply({"op": "MERGE"}),
])
def test_a_bad_operation_is_an_error_and_changes_nothing(operation):
    bank = _bank()
    before = dict(bank.entries)
    observation = operation(bank)
    assert observation.startswith("Error:"), observation
    assert bank.entries == before and bank.next_id == 3


def test_a_full_bank_refuses_to_add_but_can_still_update():
    bank = _bank()
    assert bank.add("Tamo Vesk's job is weaver.") == "Added memory 3."
    before = dict(bank.entries)
    assert bank.add("Tamo Vesk's favourite colour is teal.").startswith("Error: the memory bank is full")
    assert bank.entries == before
    assert bank.update(3, "Tamo Vesk's job is locksmith.") == "Updated memory 3."


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "update", "arguments": {"memory_id": 1, "content": }</tool_call>',  # broken JSON
    '<tool_call>{"name": "update", "arguments": {"memory_id": "1", "content": "x y"}}</tool_call>',  # id as text
    '<tool_call>{"name": "delete", "arguments": {"memory_id": 1.5}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"content": 42}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "forget", "arguments": {"memory_id": 1}}</tool_call>',
])
def test_bad_tool_calls_through_the_toolbox_change_nothing(text):
    bank = _bank()
    before = dict(bank.entries)
    _, observations = Toolbox(bank.tools()).run(text)
    assert len(observations) == 1 and observations[0].startswith("Error:"), observations
    assert bank.entries == before


# --- the manager environment ----------------------------------------------------------------------------
def _episode(text: str) -> Episode:
    calls = [c.to_dict() for c in parse_tool_calls(text).calls]
    return Episode(prompt=[], turns=[Turn("prompt", 0, 0, ""), Turn("model", 0, 0, text, content=text,
                                                                      tool_calls=calls)])


def test_manager_tasks_are_solvable_from_what_the_prompt_shows(tasks):
    """Every memory an ideal UPDATE or DELETE targets is among the related memories in the prompt."""
    targeted = [t for t in tasks if t["ideal"]["op"] in ("UPDATE", "DELETE")]
    assert targeted
    for t in targeted:
        assert t["ideal"]["target"] in [m["id"] for m in t["related"]], t["id"]
    assert {t["ideal"]["op"] for t in tasks} == set(OPS)


def test_the_demonstration_scores_correct_and_runs_cleanly(tasks, dialogues):
    env = MemoryManagerEnv()
    assert isinstance(env, Environment)
    for task in tasks[:60]:
        reply = demonstration(task)[-1]["content"]
        assert env.score(task, _episode(reply)) == {"correct": 1.0, "op": task["ideal"]["op"], "calls": 1.0}
        toolbox = env.toolbox_for(task)
        _, observations = toolbox.run(reply)
        assert not observations[0].startswith("Error:"), observations
    assert env.prompt(tasks[0])[1]["content"] == demonstration(tasks[0])[0]["content"]


def test_wrong_operations_score_incorrect(tasks):
    env = MemoryManagerEnv()
    update = next(t for t in tasks if t["ideal"]["op"] == "UPDATE")
    other_id = next(m["id"] for m in update["bank"]["entries"] if m["id"] != update["ideal"]["target"])
    wrong_target = ToolCall("update", {**ideal_call(update).arguments, "memory_id": other_id})
    assert env.score(update, _episode(format_tool_call(wrong_target)))["correct"] == 0.0
    assert env.score(update, _episode(format_tool_call(ToolCall("add", {"content": "x y"})))) == \
        {"correct": 0.0, "op": "ADD", "calls": 1.0}
    assert env.score(update, _episode("I would update memory 3.")) == {"correct": 0.0, "op": "none", "calls": 0.0}
    twice = format_tool_call(ideal_call(update)) * 2
    assert env.score(update, _episode(twice))["correct"] == 0.0


def test_the_toolbox_works_on_a_copy_of_the_tasks_bank(tasks):
    env = MemoryManagerEnv()
    task = next(t for t in tasks if t["ideal"]["op"] == "DELETE")
    before = json.dumps(task["bank"])
    env.toolbox_for(task).run(demonstration(task)[-1]["content"])
    assert json.dumps(task["bank"]) == before
    assert env.toolbox_for(task).names == ["add", "update", "delete", "noop"]


# --- MEM1: constant memory -------------------------------------------------------------------------------
def test_constant_memory_truncates_and_refuses_non_strings():
    memory = ConstantMemory(max_words=5)
    assert memory.rewrite("Tamo Vesk lives in Dorim") == "State saved (5 words)."
    assert memory.rewrite("one two three four five six seven").startswith("State saved, cut")
    assert memory.state == "one two three four five" and memory.to_text() == memory.state
    assert memory.rewrite(None).startswith("Error:") and memory.state == "one two three four five"
    _, observations = Toolbox(memory.tools()).run('<tool_call>{"name": "rewrite", "arguments": {"state": 3}}'
                                                  '</tool_call>')
    assert observations[0].startswith("Error:") and memory.state == "one two three four five"
    with pytest.raises(ValueError, match="max_words"):
        ConstantMemory(max_words=0)
