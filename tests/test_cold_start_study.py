"""The cold-start study of lessons 06, 08 and 12: a checkpoint inside a run is the shorter run, and the rule picks the
fewest steps at which every seed has the plan and the worst seed is good."""

from __future__ import annotations

import pytest
import torch

from agentrl_lite.course.cold_start_study import (
    PLAN_CALLS,
    TASKS,
    TOLERANCE,
    choose,
    cold_start_study,
    headroom_choice,
)
from agentrl_lite.models import tiny_policy
from agentrl_lite.sft import SFTConfig, sft

CONVERSATIONS = [[{"role": "user", "content": f"What is {a} + {a}?"}, {"role": "assistant", "content": str(2 * a)}]
                 for a in range(6)]


def test_the_first_k_steps_of_a_longer_run_are_the_k_step_run():
    config = dict(batch_size=2, lr=1e-3, seed=3, progress=False)
    model, tokenizer = tiny_policy(seed=0)
    snapshots = {}
    sft(model, tokenizer, CONVERSATIONS, None, SFTConfig(steps=3, **config),
        on_step=lambda done: snapshots.__setitem__(done, [p.detach().clone() for p in model.parameters()]))
    assert sorted(snapshots) == [1, 2, 3] and model.training is False
    short, tokenizer = tiny_policy(seed=0)
    sft(short, tokenizer, CONVERSATIONS, None, SFTConfig(steps=2, **config))
    for mid, end in zip(snapshots[2], short.parameters(), strict=True):
        assert torch.equal(mid, end)
    assert not all(torch.equal(a, b) for a, b in zip(snapshots[2], snapshots[3], strict=True)), "step 3 changed nothing"


def _rows(accuracies, calls):
    return [{"accuracy": a, "calls_per_episode": c} for a, c in zip(accuracies, calls, strict=True)]


def test_the_rule_takes_the_fewest_steps_with_the_plan_in_every_seed_and_a_good_worst_seed():
    plan, one_call = PLAN_CALLS + 0.1, 1.0
    table = {5: _rows([0.6, 0.0, 0.6], [plan, one_call, plan]),       # a knife edge: one seed lacks the plan
             10: _rows([0.5, 0.45, 0.5], [plan, plan, plan]),          # every seed has it, worst seed 0.45
             15: _rows([0.6, 0.55, 0.6], [plan, plan, plan]),          # best worst seed
             20: _rows([0.62, 0.56, 0.6], [plan, plan, plan])}
    choice = choose(table)
    assert choice["best_worst_seed_accuracy"] == 0.56
    assert choice["chosen"] == 15, "10 steps' worst seed is more than the tolerance below the best"
    table[10] = _rows([0.6, 0.56 - TOLERANCE + 0.001, 0.6], [plan] * 3)
    assert choose(table)["chosen"] == 10
    assert choose({k: _rows([0.6, 0.0], [plan, one_call]) for k in (5, 10)})["chosen"] is None


def test_the_study_records_each_seed_at_each_checkpoint_with_per_item_outcomes():
    study = cold_start_study([0, 1], "smoke", steps=(1, 2), model_name="tiny", n_items=3, k=2)
    assert study["seeds"] == [0, 1] and sorted(study["table"]) == [1, 2]
    for rows in study["table"].values():
        assert len(rows) == 2
        for row in rows:
            assert len(row["ids"]) == len(row["correct"]) == len(row["tool_calls"]) == 3
            assert row["ids"][0].startswith("wp-validation")
            assert row["accuracy"] == sum(row["correct"]) / 3
            sampled = row["sampled"]
            assert len(sampled["right_of_k"]) == 3 and all(0 <= r <= sampled["k"] for r in sampled["right_of_k"])
            assert set(sampled["by_template"]) <= {"change", "savings", "stickers", "crates"}
            assert 0.0 <= sampled["headroom"] <= 1.0
    assert study["table"][1][0]["loss"] != study["table"][2][0]["loss"]


def test_the_sql_study_scores_the_first_validation_questions_of_each_kind_with_lesson_12s_shape(monkeypatch):
    from agentrl_lite.course import cold_start_study as study_module
    from agentrl_lite.tasks import DATA_DIR, read_jsonl

    validation = read_jsonl(DATA_DIR / "sql_validation.jsonl")
    firsts = study_module._first_per_label(validation, "kind", 2)
    assert [q["kind"] for q in firsts].count("join") == 2 and len(firsts) == 8
    assert firsts == [q for q in validation if q in firsts], "file order kept"
    assert study_module._first_per_label(validation, "kind", None) == validation
    import agentrl_lite.evaluate as evaluation

    shapes = []

    original = evaluation.evaluate
    monkeypatch.setattr(evaluation, "evaluate", lambda m, t, env, tasks, config, label_key=None:
                        shapes.append((type(env).__name__, config.max_turns, config.max_new_tokens, label_key))
                        or original(m, t, env, tasks, config, label_key=label_key))
    result = cold_start_study([0], "smoke", steps=(1,), model_name="tiny", n_items=2, k=1, task="sql")
    row = result["table"][1][0]
    scored = study_module._first_per_label(validation, "kind", TASKS["sql"].per_label)[:2]
    assert row["ids"] == [q["id"] for q in scored] and set(row["sampled"]["by_template"]) <= {q["kind"] for q in scored}
    assert set(shapes) == {("SqlEnv", 3, 120, "kind")}
    with pytest.raises(ValueError, match="word-problem option"):
        cold_start_study([0], "smoke", steps=(1,), model_name="tiny", n_items=1, k=1, extra_demos={"x": 1}, task="sql")


def test_the_plan_condition_is_the_tasks():
    one_call = _sampled([1.0, 0.95], [0.1, 0.1])
    assert headroom_choice({8: one_call}) is None, "two calls for the word problems"
    assert headroom_choice({8: one_call}, plan_calls=TASKS["sql"].plan_calls) == 8
    rows = [{**row, "accuracy": 0.5} for row in one_call]
    assert choose({8: rows})["chosen"] is None and choose({8: rows}, plan_calls=0.9)["chosen"] == 8

def _sampled(calls, headroom):
    return [{"calls_per_episode": c, "sampled": {"headroom": h}} for c, h in zip(calls, headroom, strict=True)]


def test_the_headroom_rule_takes_the_most_room_among_starts_with_the_plan():
    plan = [2.0, 2.0]
    assert headroom_choice({10: _sampled(plan, [0.1, 0.0]), 15: _sampled(plan, [0.0, 0.05])}) == 10
    assert headroom_choice({10: _sampled(plan, [0.05, 0.05]), 15: _sampled(plan, [0.1, 0.0])}) == 10, "a tie: fewer"
    assert headroom_choice({10: _sampled([2.0, 1.0], [0.5, 0.5]), 15: _sampled(plan, [0.0, 0.1])}) == 15
    assert headroom_choice({10: _sampled([1.0, 1.0], [0.5, 0.5])}) is None


def test_the_lessons_cold_start_is_the_committed_studys_choice():
    """`word_problems.COLD_START_STEPS` is what the headroom rule chooses from the committed measurement."""
    from agentrl_lite.course.results import read_results
    from agentrl_lite.tasks.word_problems import COLD_START_STEPS

    study = read_results("06_cold_start_study_steps-10-15", "cpu", committed=True)["metrics"]
    assert len(study["seeds"]) >= 5 and study["settings"]["pass_k"] == 8
    assert headroom_choice({int(k): rows for k, rows in study["table"].items()}) == COLD_START_STEPS


def test_the_lessons_stickers_demonstrations_are_the_committed_studys_choice():
    """`word_problems.COLD_START_DEMOS["stickers"]` is what the headroom rule chooses among 0, 2 and 4 stickers
    demonstrations at `COLD_START_STEPS` steps, from the committed measurements (the others' demonstrations equal)."""
    from agentrl_lite.course.results import read_results
    from agentrl_lite.tasks.word_problems import COLD_START_DEMOS, COLD_START_STEPS

    table = {}
    for n, name in ((0, "06_cold_start_study_steps-10-15"), (2, "06_cold_start_study_steps-10_stickers-2"),
                    (4, "06_cold_start_study_steps-10_stickers-4")):
        study = read_results(name, "cpu", committed=True)["metrics"]
        assert len(study["seeds"]) >= 5 and study["settings"]["pass_k"] == 8
        assert {**study["settings"].get("extra_demos", {"crates": 8}), "stickers": n} == {**COLD_START_DEMOS, "stickers": n}
        table[n] = study["table"][str(COLD_START_STEPS)]
    assert headroom_choice(table) == COLD_START_DEMOS["stickers"]


def test_lesson_12s_cold_start_is_the_committed_studys_choice():
    """`tasks.sql.COLD_START_STEPS` is what the headroom rule, registered before the run (docs/design/12), chooses from
    the committed five-seed measurement of lesson 12's questions; every checkpoint makes a sql call in every seed."""
    from agentrl_lite.course.results import read_results
    from agentrl_lite.tasks.sql import COLD_START_STEPS

    study = read_results("12_cold_start_study", "cpu", committed=True)["metrics"]
    assert len(study["seeds"]) >= 5 and study["settings"]["pass_k"] == 8 and study["settings"]["task"] == "sql"
    table = {int(k): rows for k, rows in study["table"].items()}
    assert headroom_choice(table, plan_calls=TASKS["sql"].plan_calls) == COLD_START_STEPS
