"""Memory agents: the generated dialogues and questions, the memory bank as a tool, the baseline managers, the
manager environment and the constant-size memory."""

from __future__ import annotations

import json
import math
import re
from collections import Counter

import pytest

from agentrl_lite.chat import ToolCall, format_tool_call, parse_tool_calls
from agentrl_lite.env import Environment
from agentrl_lite.episode import Episode, Turn
from agentrl_lite.rewards import normalize_answer
from agentrl_lite.tasks.memory import (
    FORMAT_WEIGHT,
    KINDS,
    MARK,
    MEMORY_TEMPLATES,
    OPS,
    SIZE_PENALTY,
    SPLITS,
    UNKNOWN,
    AnswerEnv,
    ConstantMemory,
    ConstantMemoryEnv,
    MemoryBank,
    MemoryManagerEnv,
    answer_demonstrations,
    answer_score,
    answer_tasks,
    append_only,
    cold_start_conversations,
    constant_memory_reward,
    constant_memory_tasks,
    counterfactual_tasks,
    decision_reward,
    demonstration,
    gold_answer_in_bank,
    heldout_dialogues,
    ideal_call,
    last_write_wins,
    manager_note,
    manager_outcome,
    manager_reward,
    manager_tasks,
    memory_dialogues,
    memory_text,
    op_confusion,
    oracle,
    probes,
    read_fact,
    replay_constant_memory,
    replay_policy,
    state_of,
    stored_memory,
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


def test_the_heldout_dialogues_are_new_and_share_no_word_with_the_first_data_set(dialogues):
    """Lesson 11's held-out set (`heldout_dialogues`) replaced the first data set's held-out split: none of its
    invented words (names, places, values) occurs in any of the 200 first dialogues, and its file is the generator's."""
    from agentrl_lite.tasks import DATA_DIR, read_jsonl
    from agentrl_lite.tasks.memory.dialogues import _reserved_words

    heldout = heldout_dialogues()
    assert read_jsonl(DATA_DIR / "memory_heldout.jsonl") == heldout
    assert read_jsonl(DATA_DIR / "memory_validation.jsonl") == [d for d in dialogues if d["split"] == "validation"]
    def words(ds):
        return {w for d in ds for t in d["turns"] for w in re.findall(r"[a-z]+", t["text"].lower())}
    new = words(heldout) - _reserved_words()
    assert new and not new & words(dialogues), sorted(new & words(dialogues))[:5]
    assert not {d["id"] for d in heldout} & {d["id"] for d in dialogues}
    assert sum(len(d["questions"]) for d in heldout[:14]) >= 100  # the cpu profile's fourteen
    assert {q["kind"] for d in heldout[:14] for q in d["questions"]} == set(KINDS)


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
        assert env.score(task, _episode(reply)) == {"correct": 1.0, "op": task["ideal"]["op"], "calls": 1.0,
                                                    "formatted": 1.0, "probes": 1.0, "answers_all": 1.0,
                                                    "extra": 0.0, "reward": 1.0 + FORMAT_WEIGHT}
        toolbox = env.toolbox_for(task)
        _, observations = toolbox.run(reply)
        assert not observations[0].startswith("Error:"), observations
    assert env.prompt(tasks[0])[1]["content"] == demonstration(tasks[0])[0]["content"]


@pytest.mark.parametrize("note", [False, True])
def test_cold_start_conversations_show_every_task_and_each_operation_a_fifth(tasks, note):
    env = MemoryManagerEnv(note=note)
    conversations, counts = cold_start_conversations(env, tasks, seed=3, min_share=0.2)
    assert len(conversations) == sum(counts.values())
    ideal = Counter(t["ideal"]["op"] for t in tasks)
    assert ideal["DELETE"] < 0.2 * len(tasks)  # the case the resampling exists for
    for op in OPS:  # every task kept; rarer operations repeated up to the floor, none beyond it
        assert counts[op] == max(ideal[op], int(0.2 * len(tasks)))
    wanted = Counter(json.dumps(env.prompt(t) + demonstration(t, note=note)[1:]) for t in tasks)
    shown = Counter(json.dumps(c) for c in conversations)
    assert not wanted - shown
    assert conversations[0][0]["content"] == env.prompt(tasks[0])[0]["content"]  # the env's own system prompt
    assert cold_start_conversations(env, tasks, seed=3)[0] == conversations
    assert cold_start_conversations(env, tasks, seed=4)[0] != conversations


def test_the_note_names_the_memory_the_ideal_operation_reads(tasks):
    """The note before a call ("Fact: <whose what>. Memory: <[id] or none>.") agrees with the ideal operation: no
    fact for small talk, no memory for a new fact, the target for an update or deletion, a memory for a repeat."""
    seen = Counter()
    for task in tasks:
        note, event = manager_note(task), task["event"]
        seen[event] += 1
        if event == "chat":
            assert note == "Fact: none.", (task["text"], note)
        elif event == "state":
            assert note.startswith("Fact: ") and note.endswith("Memory: none."), (task["text"], note)
        elif event == "repeat":
            assert note.endswith("].") and int(note.rsplit("[", 1)[1][:-2]) in [m["id"] for m in task["related"]]
        else:
            assert note.endswith(f"Memory: [{task['ideal']['target']}]."), (task["text"], note)
    assert set(seen) == {"chat", "state", "repeat", "change", "correct", "retract"}
    env = MemoryManagerEnv(note=True)
    for task in tasks[:40]:
        reply = demonstration(task, note=True)[-1]["content"]
        assert reply.split("\n", 1)[0] == manager_note(task)
        assert env.score(task, _episode(reply))["correct"] == 1.0, reply
    assert "Fact:" in env.prompt(tasks[0])[0]["content"] and "Fact:" not in MemoryManagerEnv().prompt(tasks[0])[0]["content"]


def test_the_mark_shows_the_memory_of_the_same_person_and_attribute(tasks):
    """With mark=True the related memory that an update, a deletion or a repeat is about ends in the mark, and no
    memory is marked for a new fact or small talk: ADD against UPDATE is then read off the prompt."""
    env, seen = MemoryManagerEnv(mark=True), Counter()
    for task in tasks:
        lines = env.prompt(task)[1]["content"].split("\n\nNew message")[0].splitlines()[1:]
        marked = [int(line[1:line.index("]")]) for line in lines if line.endswith(MARK)]
        event = task["event"]
        seen[event] += 1
        if event in ("chat", "state"):
            assert marked == [], (task["text"], lines)
        elif event == "repeat":
            assert len(marked) == 1, (task["text"], lines)
        else:
            assert marked == [task["ideal"]["target"]], (task["text"], lines)
    assert set(seen) == {"chat", "state", "repeat", "change", "correct", "retract"}
    assert MARK.strip() in env.prompt(tasks[0])[0]["content"]
    assert MARK not in "".join(m["content"] for t in tasks for m in MemoryManagerEnv().prompt(t))
    with pytest.raises(ValueError, match="note or mark"):
        MemoryManagerEnv(note=True, mark=True)


def test_wrong_operations_score_incorrect(tasks):
    env = MemoryManagerEnv()
    update = next(t for t in tasks if t["ideal"]["op"] == "UPDATE")
    other_id = next(m["id"] for m in update["bank"]["entries"] if m["id"] != update["ideal"]["target"])
    wrong_target = ToolCall("update", {**ideal_call(update).arguments, "memory_id": other_id})
    assert env.score(update, _episode(format_tool_call(wrong_target)))["correct"] == 0.0
    refused = env.score(update, _episode(format_tool_call(ToolCall("add", {"content": "x y"}))))
    assert {k: refused[k] for k in ("correct", "op", "calls", "formatted", "answers_all", "reward")} == \
        {"correct": 0.0, "op": "ADD", "calls": 1.0, "formatted": 0.0, "answers_all": 0.0, "reward": 0.0}
    silent = env.score(update, _episode("I would update memory 3."))
    assert {k: silent[k] for k in ("correct", "op", "calls", "formatted")} == \
        {"correct": 0.0, "op": "none", "calls": 0.0, "formatted": 0.0}
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


# --- probes and the manager's reward ---------------------------------------------------------------------
def test_probes_follow_the_facts_said_so_far(dialogues):
    """After the last turn the probes are every question the dialogue supports, never-stated ones aside."""
    for d in dialogues[:40]:
        asked = {(q["question"], q["answer"]) for q in probes(d["turns"])}
        final = {(q["question"], q["answer"]) for q in d["questions"] if q["form"] != "never_stated"}
        assert final <= asked, d["id"]
    assert probes([]) == []


def test_the_ideal_bank_passes_every_probe_and_a_wrong_one_fails(tasks):
    for task in tasks[:120]:
        bank = MemoryBank.from_state(task["bank"])
        bank.apply(task["ideal"])
        assert all(gold_answer_in_bank(bank, q) for q in task["probes"]), task["id"]
        assert len(bank.entries) == task["ideal_size"]


def _reply(call: ToolCall) -> str:
    return format_tool_call(call)


def test_the_managers_reward_ranks_operations_by_what_the_bank_can_still_answer(tasks):
    by_event = {}
    for task in tasks:
        by_event.setdefault(task["event"], task)
    assert {"change", "correct", "retract", "repeat", "chat", "state"} <= set(by_event)
    best = 1.0 + FORMAT_WEIGHT
    for event, task in by_event.items():
        assert manager_outcome(task, _reply(ideal_call(task)))["reward"] == pytest.approx(best), event
    # a change or correction ignored, a retraction ignored: the bank answers a probe wrongly
    for event in ("change", "correct", "retract"):
        ignored = manager_outcome(by_event[event], _reply(ToolCall("noop", {})))
        kept = 1.0 if event == "retract" else 0.0  # the retracted memory is one the ideal bank no longer has
        assert ignored["answers_all"] == 0.0 and ignored["extra"] == kept, event
        assert ignored["reward"] == pytest.approx(FORMAT_WEIGHT - SIZE_PENALTY * kept), event
    # small talk or a repeat stored anyway: every probe still passes, but the bank has a memory too many
    for event in ("chat", "repeat"):
        stored = manager_outcome(by_event[event], _reply(ToolCall("add", {"content": by_event[event]["text"]})))
        assert stored["answers_all"] == 1.0 and stored["extra"] == 1.0, event
        assert stored["reward"] == pytest.approx(best - SIZE_PENALTY), event
    # a change written over the old value loses the history a "before" probe needs
    change = next(t for t in tasks if t["event"] == "change")
    content = change["ideal"]["content"].split(" (earlier:")[0] + "."
    overwritten = manager_outcome(change, _reply(ToolCall("update", {"memory_id": change["ideal"]["target"],
                                                                     "content": content})))
    assert overwritten["answers_all"] == 0.0 and 0.0 < overwritten["probes"] < 1.0
    # no call, two calls, broken JSON: no format reward, and nothing the bank held is lost
    state = by_event["state"]
    for text in ("I would add that.", _reply(ideal_call(state)) * 2, '<tool_call>{"name": "add", </tool_call>'):
        outcome = manager_outcome(state, text)
        assert outcome["formatted"] == 0.0
    assert manager_outcome(state, "nothing")["probes"] < 1.0  # the new fact was not stored


def test_manager_reward_reads_the_task_columns_and_refuses_without_them(tasks):
    rows = tasks[:6]
    completions = [[{"role": "assistant", "content": _reply(ideal_call(t))}] for t in rows]
    rewards = manager_reward([None] * 6, completions, bank=[t["bank"] for t in rows],
                             probes=[t["probes"] for t in rows], ideal_size=[t["ideal_size"] for t in rows])
    assert rewards == pytest.approx([1.0 + FORMAT_WEIGHT] * 6)
    with pytest.raises(ValueError, match="bank, probes and ideal_size"):
        manager_reward([None], completions[:1])


def test_counterfactual_copies_need_the_other_operation_for_the_same_message(dialogues):
    """A change turn without its memory is a new fact (ADD); a new fact beside a memory of the same person and
    attribute is a change (UPDATE that memory, the earlier value kept): the message is the original's, and the
    ideal operation is what the bank shows."""
    tasks = manager_tasks(dialogues[:60])
    copies = counterfactual_tasks(tasks, seed=0)
    originals = {t["id"]: t for t in tasks}
    changes = sum(t["event"] == "change" for t in tasks)
    assert Counter(t["event"] for t in copies) == {"change, memory taken out": changes, "state, memory put in": changes}
    for copy in copies:
        original = originals[copy["id"].removesuffix("-cf")]
        assert copy["text"] == original["text"] and copy["ideal"]["op"] != original["ideal"]["op"]
        fact, bank = read_fact(copy["text"]), MemoryBank.from_state(copy["bank"])
        if copy["ideal"]["op"] == "ADD":
            assert stored_memory(copy) is None and len(bank.entries) == len(original["bank"]["entries"]) - 1
            assert copy["ideal"]["content"] == memory_text(fact["attribute"], fact["entity"], [fact["value"]])
        else:
            assert stored_memory(copy) == copy["ideal"]["target"] in [m["id"] for m in copy["related"]]
            prefix, suffix = MEMORY_TEMPLATES[fact["attribute"]].format(e=fact["entity"], v="\0").split("\0")
            old = bank.entries[copy["ideal"]["target"]].removeprefix(prefix).removesuffix(suffix)
            assert old != fact["value"]
            assert copy["ideal"]["content"] == memory_text(fact["attribute"], fact["entity"], [old, fact["value"]])
        assert not bank.apply(copy["ideal"]).startswith("Error:")


def test_the_decision_reward_credits_the_operation_and_memory_whatever_the_content(tasks):
    """decision_reward pays the ideal operation on the ideal memory even when the content loses the earlier value
    (which manager_reward scores as low as a wrong operation), and nothing for another operation, another memory,
    or two calls."""
    change = next(t for t in tasks if t["event"] == "change")
    other = next(m["id"] for m in change["bank"]["entries"] if m["id"] != change["ideal"]["target"])
    new_value_only = ToolCall("update", {"memory_id": change["ideal"]["target"],
                                         "content": change["ideal"]["content"].split(" (earlier")[0] + "."})
    replies = {"ideal": _reply(ideal_call(change)), "new value only": _reply(new_value_only),
               "add": _reply(ToolCall("add", {"content": change["ideal"]["content"]})),
               "another memory": _reply(ToolCall("update", {"memory_id": other, "content": change["ideal"]["content"]})),
               "two calls": _reply(ideal_call(change)) + "\n" + _reply(ideal_call(change))}
    paid = dict(zip(replies, decision_reward([None] * 5, [[{"role": "assistant", "content": r}] for r in replies.values()],
                                             ideal=[change["ideal"]] * 5), strict=True))
    assert paid == {"ideal": 1.0, "new value only": 1.0, "add": 0.0, "another memory": 0.0, "two calls": 0.0}
    careful = manager_outcome(change, replies["new value only"])["reward"]
    assert careful < 0.5 and careful < manager_outcome(change, replies["ideal"])["reward"]  # why the term exists
    assert all(decision_reward([None], [[{"role": "assistant", "content": _reply(ideal_call(t))}]],
                               ideal=[t["ideal"]]) == [1.0] for t in tasks)
    with pytest.raises(ValueError, match="column ideal"):
        decision_reward([None], [[{"role": "assistant", "content": replies["ideal"]}]])


# --- replaying a policy, and the answer agent --------------------------------------------------------------
def test_replaying_the_ideal_policy_rebuilds_the_oracle_bank(dialogues):
    some = dialogues[:5]
    by_id = {t["id"]: t for t in manager_tasks(some)}

    def ideal_policy(batch):
        return [_episode(_reply(ideal_call(by_id[t["id"]]))) for t in batch]

    records = replay_policy(some, ideal_policy)
    for d, record in zip(some, records, strict=True):
        assert record["bank"].entries == oracle(d)[0].entries
        assert [o["op"] for o in record["ops"]] == [t["op"]["op"] for t in d["turns"]]
    silent = replay_policy(some, lambda batch: [_episode("no idea") for _ in batch])
    assert all(not r["bank"].entries and {o["op"] for o in r["ops"]} == {"none"} for r in silent)


def test_answer_tasks_show_retrieved_memories_or_the_whole_dialogue(dialogues):
    d = dialogues[0]
    bank = oracle(d)[0]
    tasks_ = answer_tasks(d, bank, "oracle")
    assert [t["id"] for t in tasks_] == [q["id"] for q in d["questions"]]
    for t in tasks_:
        lines = t["memories"].splitlines()
        ids = [int(line[1:line.index("]")]) for line in lines]
        assert ids == sorted(ids) and set(ids) <= set(bank.entries)
        if t["answer"] != UNKNOWN:
            assert normalize_answer(t["answer"]) in normalize_answer(t["memories"])
    full = answer_tasks(d, None, "full context")
    assert all(f"{d['turns'][-1]['text']}" in t["memories"] for t in full)


def test_the_answer_env_scores_the_reply_and_demonstrations_are_supported(dialogues):
    env = AnswerEnv()
    assert isinstance(env, Environment)
    task = answer_tasks(dialogues[0], oracle(dialogues[0])[0], "oracle")[0]
    assert env.score(task, _episode(task["answer"] + ".")) == {"correct": 1.0, "f1": 1.0}
    assert env.score(task, _episode("something else"))["correct"] == 0.0
    # the reply cites its evidence first: only what follows "Answer:" is graded, so the cited fact's words
    # cannot earn the answer, and the demonstration scores full marks
    assert env.score(task, _episode(f"Memory: {task['evidence']}\nAnswer: wrong"))["correct"] == 0.0
    assert env.score(task, _episode(env.demonstration(task)[0]["content"])) == {"correct": 1.0, "f1": 1.0}
    demos = answer_demonstrations(dialogues[:20])
    assert Counter(t["source"] for t in demos).keys() == {"oracle", "append-only", "full context"}
    for t in demos:
        assert t["answer"] == UNKNOWN or normalize_answer(t["answer"]) in normalize_answer(t["memories"]), t
    # lesson 11's reader never trains on a whole dialogue: asking for two sources drops the third, order kept
    two = answer_demonstrations(dialogues[:20], sources=("oracle", "append-only"))
    assert two == [t for t in demos if t["source"] != "full context"]
    with pytest.raises(ValueError, match="unknown sources"):
        answer_demonstrations(dialogues[:2], sources=("oracle", "whole dialogue"))


def test_the_evidence_an_answer_cites_is_what_the_oracle_bank_stores(dialogues):
    """Every answerable question's evidence is one or two memories of the oracle bank, word for word (a
    chained question cites the person's employer, then the employer's city); an unanswerable one words its
    fact the same way with the value unknown."""
    forms = Counter()
    for d in dialogues[:60]:
        bank = oracle(d)[0]
        for t in answer_tasks(d, bank, "oracle"):
            forms[t["form"]] += 1
            if t["answer"] == UNKNOWN:
                assert t["evidence"].endswith(" unknown.") and t["entity"] in t["evidence"], t
                assert t["evidence"] not in bank.entries.values()
                continue
            cited = t["evidence"].replace(". ", ".\n").splitlines()
            assert all(c in bank.entries.values() for c in cited), t
            assert len(cited) == (2 if t["form"] == "chained" else 1)
            assert normalize_answer(t["answer"]) in normalize_answer(cited[-1])
    assert set(forms) == {"stated", "current", "previous", "chained", "retracted", "never_stated"}


# --- the constant memory (MEM1) -----------------------------------------------------------------------------
@pytest.mark.slow
def test_constant_memory_tasks_demonstrate_the_ideal_state_and_a_bound_loses_facts(dialogues):
    env = ConstantMemoryEnv()
    assert isinstance(env, Environment)
    roomy = constant_memory_tasks(dialogues[:10], max_words=500)
    for task in roomy:
        reply = env.demonstration(task)[-1]["content"]
        assert env.score(task, _episode(reply))["correct"] == 1.0, task["id"]
    assert env.score(roomy[5], _episode("no call"))["formatted"] == 0.0
    tight = constant_memory_tasks(dialogues[:10], max_words=12)
    assert all(len(t["ideal_state"].split()) <= 12 for t in tight)
    scores = [env.score(t, _episode(env.demonstration(t)[-1]["content"]))["correct"] for t in tight]
    assert 0 < sum(scores) < len(scores), "a 12-word state cannot hold every fact of a dialogue"


def test_constant_memory_reward_and_replay(dialogues):
    tasks_ = constant_memory_tasks(dialogues[:3], max_words=500)
    env = ConstantMemoryEnv()
    good = [[{"role": "assistant", "content": env.demonstration(t)[-1]["content"]}] for t in tasks_]
    columns = {"state": [t["state"] for t in tasks_], "probes": [t["probes"] for t in tasks_],
               "max_words": [t["max_words"] for t in tasks_]}
    assert manager_reward is not constant_memory_reward
    assert constant_memory_reward([None] * len(tasks_), good, **columns) == \
        pytest.approx([1.0 + FORMAT_WEIGHT] * len(tasks_))
    forgetful = [[{"role": "assistant", "content": format_tool_call(ToolCall("rewrite", {"state": "Nothing."}))}]
                 for _ in tasks_]
    assert min(constant_memory_reward([None] * len(tasks_), forgetful, **columns)) < 1.0
    with pytest.raises(ValueError, match="state, probes and max_words"):
        constant_memory_reward([None], good[:1])
    by_text = {(t["dialogue_id"], t["turn_index"]): t for t in tasks_}
    index = {d["id"]: d for d in dialogues[:3]}

    def ideal(batch):  # the ideal rewrite of whichever turn the state and message belong to
        out = []
        for task in batch:
            key = next(k for k, t in by_text.items() if t["state"] == task["state"] and t["text"] == task["text"]
                       and k[0] in index)
            out.append(_episode(env.demonstration(by_text[key])[-1]["content"]))
        return out

    records = replay_constant_memory(dialogues[:3], ideal, max_words=500)
    for d, record in zip(dialogues[:3], records, strict=True):
        assert record["probes"] == [1.0] * len(d["turns"])
        assert record["state"] == state_of(oracle(d)[0], 500)


@pytest.mark.parametrize("which", ["manager", "constant memory"])
def test_the_grpo_trainer_reaches_the_memory_rewards_through_the_task_columns(which, dialogues):
    """One GRPO step of a tiny random policy in each memory environment: the reward functions get the columns
    they need (bank/probes/ideal_size, state/probes/max_words) and score every sample."""
    from agentrl_lite.grpo import GRPOConfig, GRPOTrainer
    from agentrl_lite.models import tiny_policy
    from agentrl_lite.rollout import RolloutConfig

    if which == "manager":
        env, reward, tasks_ = MemoryManagerEnv(), manager_reward, manager_tasks(dialogues[:2])
    else:
        env, reward, tasks_ = ConstantMemoryEnv(), constant_memory_reward, constant_memory_tasks(dialogues[:2])
    model, tokenizer = tiny_policy(seed=0)
    config = GRPOConfig(steps=1, prompts_per_step=2, group_size=2, lr=1e-4, seed=0, progress=False,
                        rollout=RolloutConfig(max_turns=1, max_new_tokens=6, temperature=1.0, progress=False))
    history = GRPOTrainer(model, tokenizer, env, tasks_, [reward], config).train()
    assert len(history) == 1 and math.isfinite(history[0]["reward"])
    assert -SIZE_PENALTY * 2 <= history[0]["reward"] <= 1.0 + FORMAT_WEIGHT
